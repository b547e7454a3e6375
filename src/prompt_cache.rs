//! `prompt_cache: on | off | 1h` (SPEC 25): whether and how a member asks
//! its door for the prompt cache. A leaf: the config reads it, settings
//! resolve it per member, the wire forms act on it.

use std::fmt;

use serde::{Deserialize, Deserializer};

/// How a member's requests ask for the provider's prompt cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PromptCache {
    /// No cache markers and no cache key.
    Off,
    /// The provider's default lifetime (five minutes on Anthropic and Bedrock).
    #[default]
    On,
    /// The one-hour lifetime where the API offers one, else as `On`.
    OneHour,
}

impl PromptCache {
    /// Whether anything is asked at all.
    pub fn is_on(self) -> bool {
        self != PromptCache::Off
    }

    /// The config's word for it.
    pub fn config_name(self) -> &'static str {
        match self {
            PromptCache::Off => "off",
            PromptCache::On => "on",
            PromptCache::OneHour => "1h",
        }
    }

    /// Reads a config value: `on`, `off` or `1h`.
    pub fn from_config(text: &str) -> Option<PromptCache> {
        match text {
            "on" => Some(PromptCache::On),
            "off" => Some(PromptCache::Off),
            "1h" => Some(PromptCache::OneHour),
            _ => None,
        }
    }
}

impl fmt::Display for PromptCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.config_name())
    }
}

impl<'de> Deserialize<'de> for PromptCache {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// Takes strings, and names whatever else it found.
        struct Words;
        impl serde::de::Visitor<'_> for Words {
            type Value = PromptCache;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("on, off or 1h")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<PromptCache, E> {
                PromptCache::from_config(text)
                    .ok_or_else(|| E::custom(format!("expected on, off or 1h, found '{text}'")))
            }
            fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<PromptCache, E> {
                Err(E::custom(format!("expected on, off or 1h, found {b}")))
            }
        }
        d.deserialize_any(Words)
    }
}

#[cfg(test)]
mod tests {
    use super::PromptCache;

    #[test]
    fn reads_the_three_words_and_nothing_else() {
        let read = |text: &str| serde_yaml::from_str::<PromptCache>(text);
        assert_eq!(read("on").unwrap(), PromptCache::On);
        assert_eq!(read("off").unwrap(), PromptCache::Off);
        assert_eq!(read("1h").unwrap(), PromptCache::OneHour);
        for bad in ["true", "5m", "60m", "'ON'", "1", "[on]"] {
            let err = read(bad).unwrap_err().to_string();
            assert!(err.contains("on, off or 1h"), "{bad}: {err}");
        }
        assert_eq!(PromptCache::default(), PromptCache::On);
        assert!(!PromptCache::Off.is_on());
    }
}
