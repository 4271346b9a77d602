//! The wire name of a unit enum variant, read from its `Serialize` impl: serde's attributes
//! (`rename_all`, `rename`) are the one place a state's, verb's or engine's name is written, and
//! `as_str` asks serde instead of repeating the table. Pure; no allocation.

use serde::Serialize;
use serde::ser::{self, Impossible, Serializer};
use std::fmt;

/// `v`'s name as serde writes it, when `v` is a unit variant (else `"?"`, which no wire uses).
pub fn name_of<T: Serialize>(v: &T) -> &'static str {
    v.serialize(Name).unwrap_or("?")
}

/// The unit variant serde names `s`, if any: the inverse of `name_of`.
pub fn from_name<T: serde::de::DeserializeOwned>(s: &str) -> Option<T> {
    use serde::de::IntoDeserializer;
    let d: serde::de::value::StrDeserializer<'_, serde::de::value::Error> = s.into_deserializer();
    T::deserialize(d).ok()
}

struct Name;

#[derive(Debug)]
struct NotUnit;

impl fmt::Display for NotUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a unit variant")
    }
}

impl std::error::Error for NotUnit {}

impl ser::Error for NotUnit {
    fn custom<T: fmt::Display>(_: T) -> Self {
        NotUnit
    }
}

type R = Result<&'static str, NotUnit>;
type No = Impossible<&'static str, NotUnit>;

macro_rules! refuse {
    ($($f:ident($t:ty)),* $(,)?) => {
        $(fn $f(self, _: $t) -> R { Err(NotUnit) })*
    };
}

impl Serializer for Name {
    type Ok = &'static str;
    type Error = NotUnit;
    type SerializeSeq = No;
    type SerializeTuple = No;
    type SerializeTupleStruct = No;
    type SerializeTupleVariant = No;
    type SerializeMap = No;
    type SerializeStruct = No;
    type SerializeStructVariant = No;

    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> R {
        Ok(variant)
    }

    refuse!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_unit_struct(&'static str),
    );

    fn serialize_none(self) -> R {
        Err(NotUnit)
    }
    fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> R {
        Err(NotUnit)
    }
    fn serialize_unit(self) -> R {
        Err(NotUnit)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, _: &T) -> R {
        Err(NotUnit)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(self, _: &'static str, _: u32, _: &'static str, _: &T) -> R {
        Err(NotUnit)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<No, NotUnit> {
        Err(NotUnit)
    }
    fn serialize_tuple(self, _: usize) -> Result<No, NotUnit> {
        Err(NotUnit)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<No, NotUnit> {
        Err(NotUnit)
    }
    fn serialize_tuple_variant(self, _: &'static str, _: u32, _: &'static str, _: usize) -> Result<No, NotUnit> {
        Err(NotUnit)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<No, NotUnit> {
        Err(NotUnit)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<No, NotUnit> {
        Err(NotUnit)
    }
    fn serialize_struct_variant(self, _: &'static str, _: u32, _: &'static str, _: usize) -> Result<No, NotUnit> {
        Err(NotUnit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum E {
        RateLimited,
        #[serde(rename = "other-name")]
        Renamed,
        #[allow(dead_code)]
        Data(u8),
    }

    #[test]
    fn a_unit_variant_is_named_as_serde_writes_it() {
        assert_eq!(name_of(&E::RateLimited), "rate_limited");
        assert_eq!(name_of(&E::Renamed), "other-name");
        assert_eq!(name_of(&E::Data(1)), "?");
        assert_eq!(serde_json::to_value(E::RateLimited).unwrap(), name_of(&E::RateLimited));
    }

    #[test]
    fn a_name_reads_back_to_its_variant() {
        assert_eq!(from_name::<E>("rate_limited"), Some(E::RateLimited));
        assert_eq!(from_name::<E>("other-name"), Some(E::Renamed));
        assert_eq!(from_name::<E>("RateLimited"), None);
        assert_eq!(from_name::<E>("data"), None);
    }
}
