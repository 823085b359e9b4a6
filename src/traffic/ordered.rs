//! A JSON value that keeps its objects' keys in the order they came. `serde_json::Value`
//! sorts them (qtune does not build serde_json with `preserve_order`), and a chat template
//! that prints a tool's schema or a call's arguments as JSON (`tools | tojson`) prints them in
//! the order it was given: a request re-serialized with sorted keys renders another prompt
//! than the one the server rendered live. The recorder reads a request body into this, so
//! the body it renders is the body the server rendered.

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// A JSON value; an object's keys in their order (a repeated key: the last value, in the
/// first key's place, as llama.cpp's parser keeps it).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum J {
    #[default]
    Null,
    Bool(bool),
    Num(serde_json::Number),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

static NULL: J = J::Null;

impl J {
    /// The value of `key` in an object (`Null` when absent or not an object).
    pub fn at(&self, key: &str) -> &J {
        match self {
            J::Obj(kv) => kv.iter().find(|(k, _)| k == key).map_or(&NULL, |(_, v)| v),
            _ => &NULL,
        }
    }

    /// Whether an object holds `key`.
    pub fn has(&self, key: &str) -> bool {
        matches!(self, J::Obj(kv) if kv.iter().any(|(k, _)| k == key))
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            J::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The string, or "" (llama.cpp's `json_value(v, key, std::string())`).
    pub fn str_or_empty(&self) -> &str {
        self.as_str().unwrap_or_default()
    }

    pub fn as_array(&self) -> Option<&[J]> {
        match self {
            J::Arr(a) => Some(a),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, J::Null)
    }

    /// Set `key` of an object (in its place when present, else last); a non-object becomes one.
    pub fn set(&mut self, key: &str, v: J) {
        if !matches!(self, J::Obj(_)) {
            *self = J::Obj(Vec::new());
        }
        if let J::Obj(kv) = self {
            match kv.iter_mut().find(|(k, _)| k == key) {
                Some((_, old)) => *old = v,
                None => kv.push((key.to_string(), v)),
            }
        }
    }

    /// Remove `key` of an object.
    pub fn remove(&mut self, key: &str) {
        if let J::Obj(kv) = self {
            kv.retain(|(k, _)| k != key);
        }
    }

    /// An object of these pairs, in this order.
    pub fn obj<const N: usize>(pairs: [(&str, J); N]) -> J {
        J::Obj(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }

    pub fn s(text: &str) -> J {
        J::Str(text.to_string())
    }

    /// Compact JSON text, in this value's order (nlohmann's `dump()`).
    pub fn dump(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl From<&serde_json::Value> for J {
    fn from(v: &serde_json::Value) -> J {
        use serde_json::Value as V;
        match v {
            V::Null => J::Null,
            V::Bool(b) => J::Bool(*b),
            V::Number(n) => J::Num(n.clone()),
            V::String(s) => J::Str(s.clone()),
            V::Array(a) => J::Arr(a.iter().map(J::from).collect()),
            V::Object(o) => J::Obj(o.iter().map(|(k, v)| (k.clone(), J::from(v))).collect()),
        }
    }
}

impl Serialize for J {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            J::Null => s.serialize_unit(),
            J::Bool(b) => s.serialize_bool(*b),
            J::Num(n) => n.serialize(s),
            J::Str(t) => s.serialize_str(t),
            J::Arr(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    seq.serialize_element(v)?;
                }
                seq.end()
            }
            J::Obj(kv) => {
                let mut m = s.serialize_map(Some(kv.len()))?;
                for (k, v) in kv {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for J {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<J, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = J;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<J, E> {
                Ok(J::Null)
            }
            fn visit_none<E>(self) -> Result<J, E> {
                Ok(J::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<J, E> {
                Ok(J::Bool(b))
            }
            fn visit_i64<E>(self, n: i64) -> Result<J, E> {
                Ok(J::Num(n.into()))
            }
            fn visit_u64<E>(self, n: u64) -> Result<J, E> {
                Ok(J::Num(n.into()))
            }
            fn visit_f64<E>(self, n: f64) -> Result<J, E> {
                Ok(serde_json::Number::from_f64(n).map_or(J::Null, J::Num))
            }
            fn visit_str<E>(self, s: &str) -> Result<J, E> {
                Ok(J::Str(s.to_string()))
            }
            fn visit_string<E>(self, s: String) -> Result<J, E> {
                Ok(J::Str(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<J, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element()? {
                    out.push(v);
                }
                Ok(J::Arr(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<J, A::Error> {
                let mut out = J::Obj(Vec::new());
                while let Some((k, v)) = map.next_entry::<String, J>()? {
                    out.set(&k, v);
                }
                Ok(out)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_order_through_a_round_trip() {
        let text = r#"{"type":"function","function":{"name":"f","description":"d","parameters":{"z":1,"a":[true,null,1.5]}}}"#;
        let j: J = serde_json::from_str(text).unwrap();
        assert_eq!(j.dump(), text);
        assert_eq!(j.at("function").at("name").as_str(), Some("f"));
        assert!(j.at("nothing").is_null());
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        // serde_json's own Value sorts them: the reason for this type.
        assert_ne!(v.to_string(), text);
    }
}
