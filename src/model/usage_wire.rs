//! Token counts as servers report them, read leniently: a count that is not
//! a non-negative number (a string, a negative, an object) is taken as not
//! reported rather than failing the reply, and a huge one is cut to
//! `MAX_RESPONSE_TOKENS`. Used with `#[serde(deserialize_with)]` on the
//! usage fields of every wire API.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::conversation::MAX_RESPONSE_TOKENS;

/// A count, or `None` when missing or not a count. Pair with
/// `#[serde(default)]`.
pub(crate) fn count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(read_count(&Value::deserialize(d)?))
}

/// A count, 0 when missing or not a count. Pair with `#[serde(default)]`.
pub(crate) fn count_or_zero<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(count(d)?.unwrap_or(0))
}

/// A nested usage object, or `None` when it does not have the expected
/// shape. Pair with `#[serde(default)]`.
pub(crate) fn object<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    Ok(serde_json::from_value(Value::deserialize(d)?).ok())
}

/// A JSON value read as a token count: a non-negative integer, a finite
/// non-negative number (truncated), or a string of digits; at most
/// `MAX_RESPONSE_TOKENS`.
pub(crate) fn read_count(value: &Value) -> Option<u64> {
    let n = match value {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .map(|f| f.min(MAX_RESPONSE_TOKENS as f64) as u64)
        }),
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    }?;
    Some(n.min(MAX_RESPONSE_TOKENS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Deserialize)]
    struct Probe {
        #[serde(default, deserialize_with = "count")]
        n: Option<u64>,
    }

    fn probe(v: Value) -> Option<u64> {
        serde_json::from_value::<Probe>(json!({ "n": v }))
            .unwrap()
            .n
    }

    #[test]
    fn counts_are_read_leniently_and_bounded() {
        assert_eq!(probe(json!(12)), Some(12));
        assert_eq!(probe(json!(12.9)), Some(12));
        assert_eq!(probe(json!("34")), Some(34));
        assert_eq!(probe(json!(-5)), None);
        assert_eq!(probe(json!(-0.5)), None);
        assert_eq!(probe(json!("many")), None);
        assert_eq!(probe(json!({"a": 1})), None);
        assert_eq!(probe(json!([1])), None);
        assert_eq!(probe(json!(true)), None);
        assert_eq!(probe(Value::Null), None);
        assert_eq!(probe(json!(u64::MAX)), Some(MAX_RESPONSE_TOKENS));
        assert_eq!(probe(json!(1e300)), Some(MAX_RESPONSE_TOKENS));
        let missing: Probe = serde_json::from_str("{}").unwrap();
        assert_eq!(missing.n, None);
    }
}
