//! Where a Converse request asks for Bedrock's prompt cache (SPEC 25):
//! `cachePoint` blocks after `toolConfig.tools`, after `system` and at the
//! end of the last message (and of the previous request's last message) for
//! Claude; after `system` and at those message ends for Nova (Bedrock caches no Nova tools); none for a model
//! Bedrock does not cache, which would refuse them (`ValidationException`).

use serde_json::{json, Value};

use crate::model::PromptCache;

/// Which parts of a request a model's cache takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Caching {
    /// The model caches nothing: no `cachePoint` at all.
    Nothing,
    /// System and messages, not tools (Amazon Nova).
    SystemAndMessages,
    /// Tools, system and messages (Anthropic's Claude).
    Everything,
}

impl Caching {
    /// What `model_id` (a model id or an inference profile id: `us.`,
    /// `global.`…) caches, as `prompt_cache` asks.
    pub(super) fn of(model_id: &str, cache: PromptCache) -> Caching {
        if !cache.is_on() {
            Caching::Nothing
        } else if model_id.contains("anthropic.claude") {
            Caching::Everything
        } else if model_id.contains("amazon.nova") {
            Caching::SystemAndMessages
        } else {
            Caching::Nothing
        }
    }

    pub(super) fn tools(self) -> bool {
        self == Caching::Everything
    }

    pub(super) fn system_and_messages(self) -> bool {
        self != Caching::Nothing
    }
}

/// The `cachePoint` block for `model_id`: the one-hour lifetime when
/// asked and the model takes it (Claude 4.5 and later), else the default.
/// One lifetime for every point of a request, so none is longer than one
/// before it (Bedrock refuses that).
pub(super) fn cache_point(model_id: &str, cache: PromptCache) -> Value {
    if asks_one_hour(model_id, cache) {
        json!({"cachePoint": {"type": "default", "ttl": "1h"}})
    } else {
        json!({"cachePoint": {"type": "default"}})
    }
}

/// Whether a request's cache points ask for the one-hour lifetime: its
/// writes are then all one-hour writes (Bedrock's usage does not split
/// them by lifetime).
pub(super) fn asks_one_hour(model_id: &str, cache: PromptCache) -> bool {
    cache == PromptCache::OneHour && takes_one_hour(model_id)
}

/// Claude Opus, Sonnet and Haiku 4.5 and later take a one-hour `ttl` on
/// Bedrock; older Claude models and Nova have the five-minute cache only.
fn takes_one_hour(model_id: &str) -> bool {
    let Some(at) = model_id.find("anthropic.claude-") else {
        return false;
    };
    let mut parts = model_id[at + "anthropic.claude-".len()..].split(['-', ':']);
    if !matches!(parts.next(), Some("opus" | "sonnet" | "haiku")) {
        return false;
    }
    let number = |part: Option<&str>| {
        part.filter(|p| p.len() <= 2)
            .and_then(|p| p.parse::<u32>().ok())
    };
    match (number(parts.next()), number(parts.next())) {
        (Some(major), minor) => (major, minor.unwrap_or(0)) >= (4, 5),
        (None, _) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_models_cache_what() {
        let on = PromptCache::On;
        for claude in [
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "anthropic.claude-3-7-sonnet-20250219-v1:0",
            "global.anthropic.claude-opus-4-1-20250805-v1:0",
        ] {
            assert_eq!(Caching::of(claude, on), Caching::Everything, "{claude}");
        }
        for nova in ["amazon.nova-pro-v1:0", "us.amazon.nova-2-lite-v1:0"] {
            assert_eq!(Caching::of(nova, on), Caching::SystemAndMessages, "{nova}");
        }
        for other in [
            "meta.llama3-70b-instruct-v1:0",
            "openai.gpt-oss-120b-1:0",
            "x",
        ] {
            assert_eq!(Caching::of(other, on), Caching::Nothing, "{other}");
        }
        let claude = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
        assert_eq!(Caching::of(claude, PromptCache::Off), Caching::Nothing);
    }

    #[test]
    fn one_hour_only_where_the_model_takes_it() {
        let hour = json!({"cachePoint": {"type": "default", "ttl": "1h"}});
        let five = json!({"cachePoint": {"type": "default"}});
        let one = PromptCache::OneHour;
        for takes in [
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "global.anthropic.claude-opus-4-6-v1",
            "anthropic.claude-haiku-4-5-20251001-v1:0",
            "anthropic.claude-sonnet-5-20260101-v1:0",
        ] {
            assert_eq!(cache_point(takes, one), hour, "{takes}");
        }
        for not in [
            "anthropic.claude-sonnet-4-20250514-v1:0",
            "anthropic.claude-opus-4-1-20250805-v1:0",
            "anthropic.claude-3-7-sonnet-20250219-v1:0",
            "amazon.nova-pro-v1:0",
        ] {
            assert_eq!(cache_point(not, one), five, "{not}");
        }
        let claude = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
        assert_eq!(cache_point(claude, PromptCache::On), five);
    }
}
