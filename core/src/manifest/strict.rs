//! Reading one YAML document into JSON the way the apiserver's strict decoding does: a key given twice is an
//! error (serde_json's own `Value` keeps the last one silently), nesting is bounded, and aliases cannot
//! multiply the input (every value read counts against a budget that grows with the text, not the aliases).

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// A value at most `levels` collections deep, drawing on `budget` for every value it reads.
pub struct Strict<'a> {
    pub levels: usize,
    /// The depth limit, for the message.
    pub max_depth: usize,
    pub budget: &'a mut usize,
}

impl Strict<'_> {
    fn spend<E: de::Error>(&mut self) -> Result<(), E> {
        *self.budget = self.budget.checked_sub(1).ok_or_else(|| {
            E::custom("the document holds more values than its text: aliases expand too far")
        })?;
        Ok(())
    }

    fn nested<E: de::Error>(&mut self) -> Result<Strict<'_>, E> {
        let levels = self.levels.checked_sub(1).ok_or_else(|| {
            E::custom(format!(
                "nesting deeper than {} levels (raise the limit with --max-depth)",
                self.max_depth
            ))
        })?;
        Ok(Strict {
            levels,
            max_depth: self.max_depth,
            budget: &mut *self.budget,
        })
    }
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(mut self, v: bool) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(mut self, v: i64) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(mut self, v: u64) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(mut self, v: f64) -> Result<Value, E> {
        self.spend()?;
        // As serde_json's `Value`: a number JSON cannot hold (NaN, infinity) becomes null.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(mut self, v: &str) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(mut self, v: String) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::String(v))
    }

    fn visit_none<E: de::Error>(mut self) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Null)
    }

    fn visit_unit<E: de::Error>(mut self) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        self.spend()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.nested()?)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        self.spend()?;
        let mut fields = Map::new();
        while let Some(key) = map.next_key_seed(NewKey { fields: &fields })? {
            let value = map.next_value_seed(self.nested()?)?;
            fields.insert(key, value);
        }
        Ok(Value::Object(fields))
    }
}

/// A mapping key that the mapping does not hold yet; the error carries the key's own line.
struct NewKey<'a> {
    fields: &'a Map<String, Value>,
}

impl<'de> DeserializeSeed<'de> for NewKey<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for NewKey<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<String, E> {
        if self.fields.contains_key(key) {
            return Err(E::custom(format!("duplicate field {key:?}")));
        }
        Ok(key.to_owned())
    }
}
