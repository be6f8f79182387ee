//! The Redis keys of the stock Redis holds, per product and shared, under the app's prefix.
//!
//! On a Redis Cluster a script may only touch keys of one slot, and a key's slot is that of its
//! hash tag, the part between its first `{` and `}`. A `redis-lua-stream` purchase touches its
//! product's counter, charges and buyers *and* the stream its order waits in, so products are
//! dealt into **lanes**: a product's keys and its lane's stream carry the lane's tag (`{L3}`),
//! one slot. The consumers read each lane's stream. One Redis holds every lane anyway, so there
//! the stock has one lane, one stream, as it always had; a cluster has [`CLUSTER_LANES`],
//! which its slots spread over its masters. A product's lane is its id modulo the lanes: every
//! instance of a deployment, reaching the same Redis the same way, agrees on it.

/// Lanes on a Redis Cluster: enough that three or more masters each serve some.
pub const CLUSTER_LANES: u64 = 16;

/// The names of the keys, all under one prefix, dealt into lanes.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
    lanes: u64,
}

impl Keys {
    /// The keys of one Redis: one lane.
    pub fn new(prefix: &str) -> Keys {
        Keys::in_lanes(prefix, 1)
    }

    /// The keys dealt into `lanes` lanes (at least one).
    pub fn in_lanes(prefix: &str, lanes: u64) -> Keys {
        Keys {
            prefix: prefix.to_string(),
            lanes: lanes.max(1),
        }
    }

    /// How many lanes there are.
    pub fn lanes(&self) -> u64 {
        self.lanes
    }

    /// The lane of `product`.
    pub fn lane(&self, product: u64) -> u64 {
        product % self.lanes
    }

    /// `<prefix>{L<lane>}:`, what every key of the lane starts with.
    fn tagged(&self, lane: u64) -> String {
        format!("{}{{L{lane}}}:", self.prefix)
    }

    /// `<prefix>{L<lane>}:stock:<product>`, what every key of the product starts with.
    fn product(&self, product: u64) -> String {
        format!("{}stock:{product}", self.tagged(self.lane(product)))
    }

    /// The product's live stock counter.
    pub fn stock(&self, product: u64) -> String {
        self.product(product)
    }

    /// The purchases the product's counter has charged (hash: purchase field → charge record,
    /// see [`charge`](super::charge)).
    pub fn requests(&self, product: u64) -> String {
        format!("{}:requests", self.product(product))
    }

    /// How many charges the product's counter has made, ever (kept by the take scripts, and
    /// by no reset set back): a sold-out product's memory reads its winners again only once it
    /// moved (see [`crate::inventory::left_and_mark`]).
    pub fn charges(&self, product: u64) -> String {
        format!("{}:charges", self.product(product))
    }

    /// Units charged to each buyer of the product (hash: user id → units), against its limit.
    pub fn buyers(&self, product: u64) -> String {
        format!("{}:buyers", self.product(product))
    }

    /// The product's per-user limit.
    pub fn limit(&self, product: u64) -> String {
        format!("{}:limit", self.product(product))
    }

    /// The product's sale rules (JSON of [`crate::api::SaleRules`]): what a purchase is
    /// admitted by, readable while the database is out of reach.
    pub fn rules(&self, product: u64) -> String {
        format!("{}:rules", self.product(product))
    }

    /// The product's marker: the Redis epoch its stock was written with, beside the counter
    /// and in the database (see [`super::epoch`]).
    pub fn epoch(&self, product: u64) -> String {
        format!("{}:epoch", self.product(product))
    }

    /// Units of the product's orders waiting in the stream (kept by the scripts).
    pub fn waiting(&self, product: u64) -> String {
        format!("{}:waiting", self.product(product))
    }

    /// The queue of a product sold first come, first served (hash: its units, the units
    /// promised to clicks, the units back home, each buyer's and each click's units being
    /// served; see [`crate::first_come`]).
    pub fn arrivals(&self, product: u64) -> String {
        format!("{}arrivals:{product}", self.tagged(self.lane(product)))
    }

    /// The clicks of that queue being served (sorted set: a click's field by the Redis time
    /// its place is given up by, should its instance never settle it).
    pub fn serving(&self, product: u64) -> String {
        format!(
            "{}arrivals:{product}:serving",
            self.tagged(self.lane(product))
        )
    }

    /// A waiting count no product has, in `lane`: where an entry of unknown product is
    /// counted off.
    pub fn no_product_waiting(&self, lane: u64) -> String {
        format!("{}stock:none:waiting", self.tagged(lane))
    }

    /// The channel on which a product reset or repaired is announced: every instance forgets
    /// all it remembered of it (see [`announce`](super::announce)).
    pub fn forget(&self) -> String {
        format!("{}products:forget", self.prefix)
    }

    /// The channel on which a product whose units came back is announced: every instance
    /// forgets that it was sold out and keeps its rules (see [`announce`](super::announce)).
    pub fn restocked(&self) -> String {
        format!("{}products:restocked", self.prefix)
    }

    /// The keys of `product`'s own counter, for the scripts that act on any counter.
    pub fn counter(&self, product: u64) -> CounterKeys {
        CounterKeys {
            stock: self.stock(product),
            requests: self.requests(product),
            charges: self.charges(product),
            buyers: self.buyers(product),
            limit: self.limit(product),
            epoch: self.epoch(product),
        }
    }

    /// The keys of one part of a split product's stock (see [`crate::redis_stock::split`]):
    /// part `p` of product `id` lives in lane `(id + p) mod lanes`, so on a cluster the parts
    /// of one product sit in as many different lanes as there are lanes, and on one Redis in
    /// its one lane.
    pub fn part(&self, product: u64, part: u32) -> PartKeys {
        let lane = (product + u64::from(part)) % self.lanes;
        let base = format!("{}split:{product}:{part}", self.tagged(lane));
        PartKeys {
            allotted: format!("{base}:allotted"),
            sent: format!("{base}:sent"),
            received: format!("{base}:received"),
            counter: CounterKeys {
                requests: format!("{base}:requests"),
                charges: format!("{base}:charges"),
                buyers: format!("{base}:buyers"),
                limit: format!("{base}:limit"),
                epoch: format!("{base}:epoch"),
                stock: base,
            },
        }
    }

    /// The number of parts a split product's stock is kept in, beside its rules.
    pub fn parts(&self, product: u64) -> String {
        format!("{}:parts", self.product(product))
    }

    /// Orders accepted and not yet placed in the database, of the products of `lane`.
    pub fn stream(&self, lane: u64) -> String {
        format!("{}orders:stream", self.tagged(lane))
    }

    /// Pending field ([`charge::pending_field`](super::charge::pending_field)) → product id of
    /// every entry in `lane`'s stream.
    pub fn pending(&self, lane: u64) -> String {
        format!("{}orders:pending", self.tagged(lane))
    }
}

/// The keys of one counter — a product's own, or a part of a split product — with what the
/// take scripts need beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterKeys {
    /// The units on sale.
    pub stock: String,
    /// Purchase field → charge record (of the buyers whose home a part is).
    pub requests: String,
    /// How many charges the counter has made, ever.
    pub charges: String,
    /// Units charged to each buyer.
    pub buyers: String,
    /// The product's per-user limit (copied into every part).
    pub limit: String,
    /// The marker: the epoch the counter was written at.
    pub epoch: String,
}

/// The keys of one part of a split product: its counter's, and what the moves between parts
/// keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartKeys {
    pub counter: CounterKeys,
    /// Units ever put into this part: its share at the reset, plus the units moved in, less
    /// the units moved out. The part's counter is this, less the units its charges hold.
    pub allotted: String,
    /// Moves out of this part (hash: move id → `units:destination part`).
    pub sent: String,
    /// Moves into this part that arrived (hash: move id → units).
    pub received: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key's hash tag: what a cluster computes its slot from.
    fn tag(key: &str) -> &str {
        let open = key.find('{').expect("a tag");
        let close = open + key[open..].find('}').expect("a closed tag");
        &key[open + 1..close]
    }

    #[test]
    fn a_product_s_keys_and_its_lane_s_stream_share_one_hash_tag() {
        let keys = Keys::in_lanes("run7:", CLUSTER_LANES);
        let product = 42;
        let lane = keys.lane(product);
        let stream = keys.stream(lane);
        for key in [
            keys.stock(product),
            keys.requests(product),
            keys.charges(product),
            keys.buyers(product),
            keys.limit(product),
            keys.rules(product),
            keys.epoch(product),
            keys.waiting(product),
            keys.arrivals(product),
            keys.serving(product),
            keys.pending(lane),
            keys.no_product_waiting(lane),
        ] {
            assert_eq!(tag(&key), tag(&stream), "{key}");
            assert!(key.starts_with("run7:"), "{key}");
        }
        assert_ne!(tag(&keys.stock(43)), tag(&keys.stock(42)));
        assert_eq!(tag(&keys.stock(42 + CLUSTER_LANES)), tag(&keys.stock(42)));
    }

    #[test]
    fn one_redis_has_one_lane_for_every_product() {
        let keys = Keys::new("");
        assert_eq!(keys.lanes(), 1);
        assert_eq!(keys.lane(12_345), 0);
        assert_eq!(keys.stream(0), "{L0}:orders:stream");
        assert_eq!(keys.stock(7), "{L0}:stock:7");
    }
}
