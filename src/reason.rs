//! Why a request failed and why a run moved on, as typed values whose
//! `Display` is the wire string of SPEC section 4 (`http_503`, `network`,
//! `cooldown`, ...) used by `provider.retry`, `model.fallback`, the stderr
//! line, the trajectory's `model_switches` and the log database (a leaf:
//! the events carry these types to the edge).

use std::fmt;

use strum::IntoEnumIterator;

/// The failure reason of one request (SPEC 4 "Failure reasons"). Its wire
/// name is the variant's in snake case (`http_<status>` for `Http`), the
/// one table `Display` and `parse` both read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum FailureReason {
    /// An HTTP error status.
    Http(u16),
    /// Connection refused, reset, or dropped before or during a reply.
    Network,
    /// No first event in time, or silence past the idle limit.
    Timeout,
    /// The stream ended without its finish marker (or broke a bound).
    StreamIncomplete,
    /// A finished reply with nothing in it.
    EmptyResponse,
    /// The account's quota, credit or billing is exhausted.
    Quota,
    /// The prompt does not fit the context window.
    ContextOverflow,
    /// The vendor marked the reply as a refusal.
    Refusal,
    /// A request that could not be built or sent.
    Error,
}

impl FailureReason {
    /// Parses a wire string (the inverse of `Display`).
    pub(crate) fn parse(text: &str) -> Option<FailureReason> {
        match text.strip_prefix("http_") {
            Some(status) if status.len() == 3 && status.bytes().all(|b| b.is_ascii_digit()) => {
                status.parse().ok().map(FailureReason::Http)
            }
            Some(_) => None,
            None => FailureReason::iter()
                .filter(|reason| !matches!(reason, FailureReason::Http(_)))
                .find(|reason| <&str>::from(reason) == text),
        }
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureReason::Http(status) => write!(f, "http_{status}"),
            named => f.write_str(named.into()),
        }
    }
}

impl serde::Serialize for FailureReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Test fixtures name reasons by their wire strings.
#[cfg(test)]
impl From<&str> for FailureReason {
    fn from(text: &str) -> Self {
        FailureReason::parse(text).unwrap_or_else(|| panic!("not a failure reason: {text}"))
    }
}

impl PartialEq<&str> for FailureReason {
    fn eq(&self, other: &&str) -> bool {
        FailureReason::parse(other) == Some(*self)
    }
}

/// How one request ended, as the request's record keeps it (SPEC 8
/// `model_requests.outcome`, the trace's chat span): answered, failed for
/// a reason of section 4, cut short by a cancel or a limit, or cut as the
/// loser of a hedge (SPEC 23). Set once, where the request ends; its
/// `Display` is the column's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestOutcome {
    /// An answer (`ok`).
    Ok,
    /// A failure, named by its reason.
    Failed(FailureReason),
    /// Cut short by a cancel or a limit (`interrupted`).
    Interrupted,
    /// Cut as the loser of a hedge (`hedged_out`).
    HedgedOut,
}

impl fmt::Display for RequestOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestOutcome::Ok => f.write_str("ok"),
            RequestOutcome::Failed(reason) => reason.fmt(f),
            RequestOutcome::Interrupted => f.write_str("interrupted"),
            RequestOutcome::HedgedOut => f.write_str("hedged_out"),
        }
    }
}

/// Why a run moved from one chain member to the next (SPEC 4 and 5). Its
/// own reasons' wire names are the variants' in snake case; a failure's is
/// the failure reason's.
#[derive(Debug, Clone, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString)]
#[strum(serialize_all = "snake_case")]
pub enum SwitchReason {
    /// The member failed: after `switch_after` transient failures, at once
    /// on quota, or on a Retry-After too long to wait.
    #[strum(disabled)]
    Failed(FailureReason),
    /// Another run's health record says the member is cooling down (SPEC 13).
    Cooldown,
    /// The provider's published limit is used up for longer than
    /// `max_backoff` (SPEC 17).
    RateLimit,
    /// A budget the member falls under is spent (SPEC 19).
    Budget,
    /// A hedged request to the next member answered first (SPEC 23).
    Hedge,
    /// A reason this version does not know, read from a checkpoint written
    /// by another one: kept as it was.
    #[strum(disabled)]
    Other(String),
}

impl SwitchReason {
    /// Parses a wire string; an unknown one is kept as `Other`.
    pub(crate) fn parse(text: &str) -> SwitchReason {
        text.parse()
            .ok()
            .or_else(|| FailureReason::parse(text).map(SwitchReason::Failed))
            .unwrap_or_else(|| SwitchReason::Other(text.to_string()))
    }
}

impl From<FailureReason> for SwitchReason {
    fn from(reason: FailureReason) -> Self {
        SwitchReason::Failed(reason)
    }
}

impl fmt::Display for SwitchReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SwitchReason::Failed(reason) => reason.fmt(f),
            SwitchReason::Other(text) => f.write_str(text),
            named => f.write_str(named.into()),
        }
    }
}

impl PartialEq<&str> for SwitchReason {
    fn eq(&self, other: &&str) -> bool {
        SwitchReason::parse(other) == *self
    }
}

impl serde::Serialize for SwitchReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for SwitchReason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(SwitchReason::parse(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_strings_round_trip() {
        for text in [
            "http_429",
            "http_503",
            "network",
            "timeout",
            "stream_incomplete",
            "empty_response",
            "quota",
            "cooldown",
            "rate_limit",
            "budget",
        ] {
            assert_eq!(SwitchReason::parse(text).to_string(), text);
        }
        assert_eq!(
            SwitchReason::parse("http_503"),
            SwitchReason::Failed(FailureReason::Http(503))
        );
        assert_eq!(
            SwitchReason::parse("something_new"),
            SwitchReason::Other("something_new".into())
        );
        for text in ["context_overflow", "refusal", "error", "http_404"] {
            assert_eq!(FailureReason::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(FailureReason::parse("Timeout"), None);
        assert_eq!(FailureReason::parse("http"), None);
        assert_eq!(FailureReason::parse("http_+50"), None);
        assert_eq!(FailureReason::parse("http_5030"), None);
        assert_eq!(FailureReason::parse("http_"), None);
    }

    #[test]
    fn a_request_outcome_is_its_columns_value() {
        for (outcome, text) in [
            (RequestOutcome::Ok, "ok"),
            (RequestOutcome::Failed(FailureReason::Http(503)), "http_503"),
            (RequestOutcome::Failed(FailureReason::Timeout), "timeout"),
            (RequestOutcome::Interrupted, "interrupted"),
            (RequestOutcome::HedgedOut, "hedged_out"),
        ] {
            assert_eq!(outcome.to_string(), text);
        }
    }

    #[test]
    fn serialised_as_the_wire_string() {
        let json = serde_json::to_string(&SwitchReason::Cooldown).unwrap();
        assert_eq!(json, "\"cooldown\"");
        let back: SwitchReason = serde_json::from_str("\"http_502\"").unwrap();
        assert_eq!(back, SwitchReason::Failed(FailureReason::Http(502)));
    }
}
