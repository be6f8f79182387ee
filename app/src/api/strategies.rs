//! A set of strategies: the ones that may sell a product. On the wire a list of names; in
//! memory one word, so the sale's rules stay a plain value every request copies.

use std::fmt;

use serde::de::{SeqAccess, Visitor};
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Strategy;

/// Strategies, a set (listed in catalogue order). Empty means "not named": a product reset
/// without the service's admin API (a test's or a benchmark's own rows) may be sold by any
/// strategy the deployment offers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Strategies(u64);

const _: () = assert!(Strategy::ALL.len() <= 64, "a set of strategies is one u64");

impl Strategies {
    /// No strategy named.
    pub const NONE: Strategies = Strategies(0);

    /// The set of `strategies`.
    pub fn of(strategies: impl IntoIterator<Item = Strategy>) -> Strategies {
        Strategies(strategies.into_iter().fold(0, |set, s| set | bit(s)))
    }

    pub fn contains(self, strategy: Strategy) -> bool {
        self.0 & bit(strategy) != 0
    }

    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }

    /// The strategies, in catalogue order.
    pub fn iter(self) -> impl Iterator<Item = Strategy> {
        Strategy::ALL
            .iter()
            .copied()
            .filter(move |s| self.contains(*s))
    }

    /// The names, comma-separated (as the database keeps them).
    pub fn names(self) -> String {
        self.iter()
            .map(Strategy::name)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The set [`Strategies::names`] wrote.
    pub fn parse(names: &str) -> Result<Strategies, String> {
        names
            .split(',')
            .filter(|n| !n.is_empty())
            .map(|n| n.parse::<Strategy>().map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()
            .map(Strategies::of)
    }
}

fn bit(strategy: Strategy) -> u64 {
    let index = Strategy::ALL
        .iter()
        .position(|s| *s == strategy)
        .unwrap_or_else(|| unreachable!("every strategy is in the catalogue"));
    1 << index
}

impl Serialize for Strategies {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        for strategy in self.iter() {
            seq.serialize_element(&strategy)?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for Strategies {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Strategies, D::Error> {
        struct List;
        impl<'de> Visitor<'de> for List {
            type Value = Strategies;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of strategy names")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strategies, A::Error> {
                let mut set = Strategies::NONE;
                while let Some(strategy) = seq.next_element::<Strategy>()? {
                    set = Strategies(set.0 | bit(strategy));
                }
                Ok(set)
            }
        }
        deserializer.deserialize_seq(List)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_keeps_what_it_was_given_in_catalogue_order() {
        let set = Strategies::of([Strategy::RedisLua, Strategy::Conditional]);
        assert!(set.contains(Strategy::Conditional) && !set.contains(Strategy::Naive));
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            [Strategy::Conditional, Strategy::RedisLua]
        );
        assert_eq!(Strategies::parse(&set.names()), Ok(set));
        assert_eq!(Strategies::parse(""), Ok(Strategies::NONE));
        let json = serde_json::to_string(&set).expect("json");
        assert_eq!(json, r#"["conditional","redis-lua"]"#);
        assert_eq!(
            serde_json::from_str::<Strategies>(&json).expect("back"),
            set
        );
    }
}
