//! `limits:` and a named provider's own `limits:` (SPEC 24): rate limits
//! for providers that publish none, strict like every key: each count a
//! whole number of at least 1, `per` one of `second`, `minute`, `hour`,
//! `day`, an entry naming a `model` or a `provider` and at least one
//! count. Checked as each file is read, so an error names key and file.

use serde::{Deserialize, Deserializer};
use serde_yaml::Value;

/// `per:` the period a limit refills over, evenly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Per {
    Second,
    #[default]
    Minute,
    Hour,
    Day,
}

impl Per {
    pub(crate) fn millis(self) -> i64 {
        match self {
            Per::Second => 1_000,
            Per::Minute => 60_000,
            Per::Hour => 3_600_000,
            Per::Day => 86_400_000,
        }
    }
}

impl<'de> Deserialize<'de> for Per {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) if s == "second" => Ok(Per::Second),
            Value::String(s) if s == "minute" => Ok(Per::Minute),
            Value::String(s) if s == "hour" => Ok(Per::Hour),
            Value::String(s) if s == "day" => Ok(Per::Day),
            other => Err(serde::de::Error::custom(format!(
                "expected second, minute, hour or day, found {}",
                shown(&other)
            ))),
        }
    }
}

/// A count of a limit: a whole number of at least 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Count(pub u64);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        match value.as_u64() {
            Some(n) if n >= 1 => Ok(Count(n)),
            _ => Err(serde::de::Error::custom(format!(
                "must be a whole number of at least 1, got {}",
                shown(&value)
            ))),
        }
    }
}

/// A value as an error message shows it (short).
fn shown(value: &Value) -> String {
    let text = match value {
        Value::String(s) => format!("'{s}'"),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "nothing".into(),
        _ => "a list or mapping".into(),
    };
    text.chars().take(60).collect()
}

/// The counts of one limit and their period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Rates {
    pub requests: Option<u64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub tokens: Option<u64>,
    pub per: Per,
}

impl Rates {
    fn any(&self) -> bool {
        self.requests.is_some()
            || self.input_tokens.is_some()
            || self.output_tokens.is_some()
            || self.tokens.is_some()
    }
}

/// An entry or a provider's limits with no count.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LimitError {
    #[error("give at least one of requests, input_tokens, output_tokens, tokens")]
    NoCount,
    #[error("name a `model` or a `provider`")]
    Neither,
    #[error("give `model` or `provider`, not both (one entry each)")]
    Both,
}

/// A named provider's own `limits:` (they apply to each of its models).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawRates")]
pub(crate) struct ProviderLimits(pub Rates);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRates {
    requests: Option<Count>,
    input_tokens: Option<Count>,
    output_tokens: Option<Count>,
    tokens: Option<Count>,
    per: Option<Per>,
}

impl RawRates {
    fn rates(&self) -> Rates {
        Rates {
            requests: self.requests.map(|c| c.0),
            input_tokens: self.input_tokens.map(|c| c.0),
            output_tokens: self.output_tokens.map(|c| c.0),
            tokens: self.tokens.map(|c| c.0),
            per: self.per.unwrap_or_default(),
        }
    }
}

impl TryFrom<RawRates> for ProviderLimits {
    type Error = LimitError;
    fn try_from(raw: RawRates) -> Result<Self, LimitError> {
        let rates = raw.rates();
        if !rates.any() {
            return Err(LimitError::NoCount);
        }
        Ok(ProviderLimits(rates))
    }
}

/// One entry of `limits:`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawEntry")]
pub(crate) struct LimitEntry {
    /// A spec; `*` matches any run of characters.
    pub model: Option<String>,
    /// A built-in or named provider.
    pub provider: Option<String>,
    pub rates: Rates,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    model: Option<String>,
    provider: Option<String>,
    requests: Option<Count>,
    input_tokens: Option<Count>,
    output_tokens: Option<Count>,
    tokens: Option<Count>,
    per: Option<Per>,
}

impl TryFrom<RawEntry> for LimitEntry {
    type Error = LimitError;
    fn try_from(raw: RawEntry) -> Result<Self, LimitError> {
        let rates = RawRates {
            requests: raw.requests,
            input_tokens: raw.input_tokens,
            output_tokens: raw.output_tokens,
            tokens: raw.tokens,
            per: raw.per,
        }
        .rates();
        match (&raw.model, &raw.provider) {
            (None, None) => return Err(LimitError::Neither),
            (Some(_), Some(_)) => return Err(LimitError::Both),
            _ => {}
        }
        if !rates.any() {
            return Err(LimitError::NoCount);
        }
        Ok(LimitEntry {
            model: raw.model,
            provider: raw.provider,
            rates,
        })
    }
}
