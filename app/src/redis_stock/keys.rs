//! The Redis keys of the stock Redis holds, per product and shared, under the app's prefix.

/// The names of the keys, all under one prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.to_string(),
        }
    }

    /// The product's live stock counter.
    pub fn stock(&self, product: u64) -> String {
        format!("{}stock:{product}", self.prefix)
    }

    /// The purchases the product's counter has charged (hash: purchase field → charge record,
    /// see [`charge`]).
    pub fn requests(&self, product: u64) -> String {
        format!("{}stock:{product}:requests", self.prefix)
    }

    /// How many charges the product's counter has made, ever (kept by the take scripts, and
    /// by no reset set back): a sold-out product's memory reads its winners again only once it
    /// moved (see [`crate::inventory::left_and_mark`]).
    pub fn charges(&self, product: u64) -> String {
        format!("{}stock:{product}:charges", self.prefix)
    }

    /// Units charged to each buyer of the product (hash: user id → units), against its limit.
    pub fn buyers(&self, product: u64) -> String {
        format!("{}stock:{product}:buyers", self.prefix)
    }

    /// The product's per-user limit.
    pub fn limit(&self, product: u64) -> String {
        format!("{}stock:{product}:limit", self.prefix)
    }

    /// The product's sale rules (JSON of [`crate::api::SaleRules`]): what a purchase is
    /// admitted by, readable while the database is out of reach.
    pub fn rules(&self, product: u64) -> String {
        format!("{}stock:{product}:rules", self.prefix)
    }

    /// The product's marker: the Redis epoch its stock was written with, beside the counter
    /// and in the database (see [`super::epoch`]).
    pub fn epoch(&self, product: u64) -> String {
        format!("{}stock:{product}:epoch", self.prefix)
    }

    /// Units of the product's orders waiting in the stream (kept by the scripts).
    pub fn waiting(&self, product: u64) -> String {
        format!("{}stock:{product}:waiting", self.prefix)
    }

    /// The queue of a product sold first come, first served (hash: its units, the units
    /// promised to clicks, the units back home, each buyer's and each click's units being
    /// served; see [`crate::first_come`]).
    pub fn arrivals(&self, product: u64) -> String {
        format!("{}arrivals:{product}", self.prefix)
    }

    /// The clicks of that queue being served (sorted set: a click's field by the Redis time
    /// its place is given up by, should its instance never settle it).
    pub fn serving(&self, product: u64) -> String {
        format!("{}arrivals:{product}:serving", self.prefix)
    }

    /// A waiting count no product has: where an entry of unknown product is counted off.
    pub fn no_product_waiting(&self) -> String {
        format!("{}stock:none:waiting", self.prefix)
    }

    /// The channel on which a product reset or repaired is announced: every instance forgets
    /// all it remembered of it (see [`announce`]).
    pub fn forget(&self) -> String {
        format!("{}products:forget", self.prefix)
    }

    /// The channel on which a product whose units came back is announced: every instance
    /// forgets that it was sold out and keeps its rules (see [`announce`]).
    pub fn restocked(&self) -> String {
        format!("{}products:restocked", self.prefix)
    }

    /// Orders accepted and not yet placed in the database, all products.
    pub fn stream(&self) -> String {
        format!("{}orders:stream", self.prefix)
    }

    /// Pending field ([`charge::pending_field`]) → product id of every entry in the stream.
    pub fn pending(&self) -> String {
        format!("{}orders:pending", self.prefix)
    }
}
