//! Servers at a distance (`--rtt`): every server the app instances talk to — MariaDB, Redis,
//! the Redlock set, ZooKeeper, etcd, memcached — behind a relay of its own that delays each
//! direction by half the round trip, so that every request the app makes to any of them costs
//! that round trip more than over loopback.
//!
//! On loopback a round trip costs tens of microseconds; inside one zone it costs about
//! 0.2–0.5 ms, across zones 1–2 ms. A strategy that holds a lock across k round trips serves at
//! most about 1 / (k × RTT) purchases of one product a second, a cost loopback hides. This
//! machine's kernel has no `netem`, so the round trip is added by [`sandbox::Relay`]s in this
//! process (their threads' CPU counts as the generator's).
//!
//! Everything the run reaches the servers through goes through the relays: the app instances,
//! the baselines (a hot-row UPDATE at a distance pays it too), the run's own reads. Only the
//! connections' set-up is not delayed (see [`sandbox::Delays`]). Without `--rtt` there is no
//! relay at all: the servers are reached directly, as they always were.
//!
//! The buyers' own round trip to the service is another setting (`--client-rtt`): a relay of
//! the same kind in front of each app instance ([`buyers_apart`]), which every request of the
//! load generator goes through.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use anyhow::{Context, Result};
use sandbox::{Delays, Endpoints, Relay};
use testkit::Api;

use crate::schema::world::Distance;

/// The relays that put a run's servers at a distance; dropping them closes every connection
/// through them. Each relay counts the exchanges it carries ([`Relays::exchanges`]).
pub struct Relays {
    /// Each server's relay, with the kind of server it leads to.
    relays: HashMap<SocketAddr, (&'static str, Relay)>,
}

/// The kinds of server, as [`Relays::exchanges`] names them.
pub const MARIADB: &str = "mariadb";
pub const REDIS: &str = "redis";
/// The Redlock set: five Redis servers, asked at once.
pub const REDLOCK: &str = "redlock";
pub const ZOOKEEPER: &str = "zookeeper";
pub const ETCD: &str = "etcd";
pub const MEMCACHED: &str = "memcached";
pub const POSTGRES: &str = "postgres";
/// The app instances, as the buyers reach them (`--client-rtt`).
pub const APP: &str = "app";

/// Puts every server `endpoints` name behind a relay that delays each direction by `rtt / 2`:
/// returns the relays, and the endpoints that lead through them (the same user, password and
/// path; the relay's address in place of the server's).
pub fn apart(endpoints: &Endpoints, rtt: Duration) -> Result<(Relays, Endpoints)> {
    let mut relays = Relays {
        relays: HashMap::new(),
    };
    let delays = Delays::round_trip(rtt);
    let mut through = |url: &str, kind| relays.through(url, kind, delays);
    let relayed = Endpoints {
        database_url: through(&endpoints.database_url, MARIADB)?,
        redis_url: through(&endpoints.redis_url, REDIS)?,
        redlock_urls: (endpoints.redlock_urls.iter())
            .map(|u| through(u, REDLOCK))
            .collect::<Result<_>>()?,
        zookeeper: through(&endpoints.zookeeper, ZOOKEEPER)?,
        etcd: (endpoints.etcd.iter())
            .map(|u| through(u, ETCD))
            .collect::<Result<_>>()?,
        memcached: through(&endpoints.memcached, MEMCACHED)?,
        postgres_url: (endpoints.postgres_url.as_deref())
            .map(|url| through(url, POSTGRES))
            .transpose()?,
    };
    Ok((relays, relayed))
}

/// `api` as the buyers reach its instances: when the run puts them `buyers` away, through a
/// relay in front of each instance that delays each direction by half the round trip, as the
/// buyers' own network would (while the relays are kept); else as it is. The buyers' round
/// trip holds no lock; it only makes each purchase take that much longer to answer.
pub fn buyers_apart(buyers: Distance, api: Api) -> Result<(Option<Relays>, Api)> {
    let Distance::Relayed { rtt_us } = buyers else {
        return Ok((None, api));
    };
    let mut relays = Relays::none();
    let delays = Delays::round_trip(Duration::from_micros(rtt_us));
    let bases = (api.bases.iter())
        .map(|base| relays.through(base, APP, delays))
        .collect::<Result<_>>()?;
    Ok((Some(relays), api.reaching(bases)?))
}

impl Relays {
    /// No relay yet: [`Relays::lead`] puts servers behind them one by one.
    pub fn none() -> Relays {
        Relays {
            relays: HashMap::new(),
        }
    }

    /// `url` with its servers behind relays adding nothing yet ([`Relays::set_rtt`] sets
    /// their distance), counted as servers of `kind`.
    pub fn lead(&mut self, url: &str, kind: &'static str) -> Result<String> {
        self.through(url, kind, Delays::NONE)
    }

    /// The exchanges carried so far to each kind of server, summed over its relays (see
    /// [`Relay::exchanges`]): a client's request after its server's answer, one round trip
    /// waited for.
    pub fn exchanges(&self) -> BTreeMap<&'static str, u64> {
        let mut counts = BTreeMap::new();
        for (kind, relay) in self.relays.values() {
            *counts.entry(*kind).or_default() += relay.exchanges();
        }
        counts
    }

    /// Every relay adds `rtt` to each round trip from now on (the chunks on their way keep
    /// theirs).
    pub fn set_rtt(&self, rtt: Duration) {
        for (_, relay) in self.relays.values() {
            relay.set_delays(Delays::round_trip(rtt));
        }
    }

    /// How many servers of `kind` stand behind relays.
    pub fn servers(&self, kind: &str) -> usize {
        self.relays.values().filter(|(k, _)| *k == kind).count()
    }

    /// `url` with each of its servers' `host:port` replaced by its relay's (one relay per
    /// server, however many URLs name it: the kind it was first named as).
    fn through(&mut self, url: &str, kind: &'static str, delays: Delays) -> Result<String> {
        replace_hosts(url, |host| {
            let server = (host.to_socket_addrs())
                .ok()
                .and_then(|mut a| a.next())
                .with_context(|| {
                    format!("`{host}` in `{url}` is no host:port to put behind a relay")
                })?;
            let relay = match self.relays.entry(server) {
                Entry::Occupied(relay) => relay.into_mut(),
                Entry::Vacant(place) => place.insert((
                    kind,
                    Relay::start_delayed(server, delays)
                        .with_context(|| format!("starting a relay to {server}"))?,
                )),
            };
            Ok(relay.1.addr().to_string())
        })
    }
}

/// `url` (`scheme://[user[:password]@]host:port[,host:port…][/path]`, or the same without the
/// scheme: a ZooKeeper connect string, a memcached address) with every `host:port` replaced
/// by what `replace` makes of it.
fn replace_hosts(url: &str, mut replace: impl FnMut(&str) -> Result<String>) -> Result<String> {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let (user, hosts) = match authority.rsplit_once('@') {
        Some((user, hosts)) => (format!("{user}@"), hosts),
        None => (String::new(), authority),
    };
    let hosts = (hosts.split(','))
        .map(&mut replace)
        .collect::<Result<Vec<_>>>()?
        .join(",");
    Ok(format!("{scheme}{user}{hosts}{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relayed(url: &str) -> String {
        replace_hosts(url, |host| Ok(format!("<{host}>"))).unwrap()
    }

    #[test]
    fn every_servers_address_is_replaced_and_nothing_else_of_its_url() {
        assert_eq!(
            relayed("mysql://root:pw@127.0.0.1:3306"),
            "mysql://root:pw@<127.0.0.1:3306>"
        );
        assert_eq!(
            relayed("redis://:p@ss@127.0.0.1:6379/2"),
            "redis://:p@ss@<127.0.0.1:6379>/2"
        );
        assert_eq!(relayed("http://127.0.0.1:2379"), "http://<127.0.0.1:2379>");
        assert_eq!(
            relayed("127.0.0.1:2181,127.0.0.1:2182/chroot"),
            "<127.0.0.1:2181>,<127.0.0.1:2182>/chroot"
        );
        assert_eq!(relayed("127.0.0.1:11211"), "<127.0.0.1:11211>");
    }

    #[test]
    fn each_server_gets_one_relay_however_many_urls_name_it() {
        let (_keep, server) = listener();
        let endpoints = Endpoints {
            database_url: format!("mysql://root@{server}"),
            redis_url: format!("redis://{server}"),
            redlock_urls: vec![format!("redis://{server}")],
            zookeeper: server.to_string(),
            etcd: vec![format!("http://{server}")],
            memcached: server.to_string(),
            postgres_url: None,
        };
        let (relays, through) = apart(&endpoints, Duration::from_micros(500)).unwrap();
        assert_eq!(relays.relays.len(), 1);
        let (kind, relay) = relays.relays.values().next().unwrap();
        assert_eq!(*kind, MARIADB, "the kind it was first named as");
        assert_eq!(through.memcached, relay.addr().to_string());
        assert_eq!(
            through.database_url,
            format!("mysql://root@{}", relay.addr())
        );
        assert_eq!(
            relay.delays(),
            Delays::round_trip(Duration::from_micros(500))
        );
    }

    /// A listening socket (kept open while the test runs) and its address.
    fn listener() -> (std::net::TcpListener, SocketAddr) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        (l, addr)
    }
}
