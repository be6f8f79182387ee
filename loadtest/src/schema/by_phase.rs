//! What the registered phases put in a report, each under its name: the figures a phase
//! measured of a strategy, the shape the run asked of it, the bars it found missed. The
//! schema holds them as JSON by name and knows none of their types; each phase reads its own
//! with its own type ([`ByPhase::get`]), so that a phase is added or changed in its own files
//! and the report's layout is the same for every phase: `{name: value}`.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// Each phase's value under its name; a phase with none is absent (a `null` read is none).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ByPhase(BTreeMap<String, Entry>);

impl ByPhase {
    /// The value of the phase named `name`, read as `T`: `None` when the phase put none, or
    /// what it put is not a `T` (a report written by another version of the phase: it says so
    /// in the log, and the phase's figures are left out rather than read half-way).
    ///
    /// # Panics
    ///
    /// When the same name is read as two types in one run: a phase's value has one type.
    pub fn get<T>(&self, name: &str) -> Option<&T>
    where
        T: DeserializeOwned + Any + Send + Sync,
    {
        let entry = self.0.get(name)?;
        let typed =
            entry
                .typed
                .get_or_init(|| match serde_json::from_value::<T>(entry.value.clone()) {
                    Ok(value) => Some(Box::new(value) as Box<dyn Any + Send + Sync>),
                    Err(error) => {
                        tracing::warn!(phase = name, %error, "a phase's figures not read");
                        None
                    }
                });
        let typed: &(dyn Any + Send + Sync) = &**typed.as_ref()?;
        Some(typed.downcast_ref::<T>().unwrap_or_else(|| {
            panic!(
                "the phase `{name}` read as two types: {}",
                std::any::type_name::<T>()
            )
        }))
    }

    /// The list the phase named `name` put (its findings, one per strategy or bar), read as
    /// `T`s; empty when it put none (see [`ByPhase::get`]).
    pub fn list<T>(&self, name: &str) -> &[T]
    where
        T: DeserializeOwned + Any + Send + Sync,
    {
        self.get::<Vec<T>>(name).map_or(&[], Vec::as_slice)
    }

    /// Whether the phase named `name` put a value.
    pub fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// Puts `value` under `name`, in place of any there.
    pub fn put<T>(&mut self, name: &str, value: T)
    where
        T: Serialize + Any + Send + Sync,
    {
        match serde_json::to_value(&value).expect("a phase's value is JSON") {
            Value::Null => {
                self.0.remove(name);
            }
            json => {
                let typed = OnceLock::new();
                let _ = typed.set(Some(Box::new(value) as Box<dyn Any + Send + Sync>));
                self.0.insert(name.to_owned(), Entry { value: json, typed });
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Keeps the values of the phases whose names `keep` accepts.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.0.retain(|name, _| keep(name));
    }
}

/// One phase's value: as JSON, and as its type once read.
struct Entry {
    value: Value,
    typed: OnceLock<Option<Box<dyn Any + Send + Sync>>>,
}

impl Entry {
    fn new(value: Value) -> Entry {
        Entry {
            value,
            typed: OnceLock::new(),
        }
    }
}

impl Clone for Entry {
    fn clone(&self) -> Entry {
        Entry::new(self.value.clone())
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        self.value == other.value
    }
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.value, f)
    }
}

impl Serialize for Entry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(s)
    }
}

impl Serialize for ByPhase {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for ByPhase {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ByPhase, D::Error> {
        let values = BTreeMap::<String, Value>::deserialize(d)?;
        Ok(ByPhase(
            (values.into_iter())
                .filter(|(_, value)| !value.is_null())
                .map(|(name, value)| (name, Entry::new(value)))
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Shape {
        factor: f64,
    }

    #[test]
    fn a_phase_reads_back_what_it_put_before_and_after_the_json() {
        let mut by = ByPhase::default();
        by.put("a", Shape { factor: 3.0 });
        assert_eq!(by.get::<Shape>("a"), Some(&Shape { factor: 3.0 }));
        let text = serde_json::to_string(&by).unwrap();
        assert_eq!(text, r#"{"a":{"factor":3.0}}"#);
        let read: ByPhase = serde_json::from_str(&text).unwrap();
        assert_eq!(read, by);
        assert_eq!(read.get::<Shape>("a"), Some(&Shape { factor: 3.0 }));
        assert!(read.get::<Shape>("b").is_none());
    }

    #[test]
    fn a_null_or_a_value_of_another_shape_reads_as_absent() {
        let read: ByPhase = serde_json::from_str(r#"{"b":null,"a":{"factor":"three"}}"#).unwrap();
        assert!(!read.has("b"));
        assert!(read.has("a"));
        assert!(read.get::<Shape>("a").is_none());
        let mut by = ByPhase::default();
        by.put("a", None::<Shape>);
        assert!(!by.has("a"));
    }

    #[test]
    fn a_list_reads_back_as_put_and_a_phase_that_put_none_as_empty() {
        let text = r#"{"a":[{"factor":1.0},{"factor":2.0}]}"#;
        let read: ByPhase = serde_json::from_str(text).unwrap();
        let list = read.list::<Shape>("a");
        assert_eq!(list, [Shape { factor: 1.0 }, Shape { factor: 2.0 }]);
        assert!(read.list::<Shape>("b").is_empty());
    }
}
