//! Prices per million tokens: the built-in table for well-known models, and
//! the cost of one response under a price.

use super::providers::{builtin, PriceNames};
use super::Usage;

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Pricing {
    pub input: f64,
    pub output: f64,
    /// Price of cached input tokens; the input price when unknown.
    pub cached_input: f64,
}

impl Pricing {
    /// The cost of one response. `usage.input_tokens` counts all input
    /// tokens, cached ones included.
    pub(crate) fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cached_input_tokens.min(usage.input_tokens);
        let fresh = usage.input_tokens - cached;
        (fresh as f64 * self.input
            + cached as f64 * self.cached_input
            + usage.output_tokens as f64 * self.output)
            / 1_000_000.0
    }
}

/// (model name prefix, input, output, cached input). Longest prefix wins, so
/// dated snapshots (`claude-sonnet-4-5-20250929`) find their family.
const TABLE: &[(&str, f64, f64, f64)] = &[
    ("gpt-5", 1.25, 10.0, 0.125),
    ("gpt-5-mini", 0.25, 2.0, 0.025),
    ("gpt-5-nano", 0.05, 0.40, 0.005),
    ("gpt-5-codex", 1.25, 10.0, 0.125),
    ("gpt-4.1", 2.0, 8.0, 0.50),
    ("gpt-4.1-mini", 0.40, 1.60, 0.10),
    ("gpt-4.1-nano", 0.10, 0.40, 0.025),
    ("gpt-4o", 2.50, 10.0, 1.25),
    ("gpt-4o-mini", 0.15, 0.60, 0.075),
    ("o3", 2.0, 8.0, 0.50),
    ("o3-mini", 1.10, 4.40, 0.55),
    ("o4-mini", 1.10, 4.40, 0.275),
    ("claude-opus-4-5", 5.0, 25.0, 0.50),
    ("claude-opus-4-1", 15.0, 75.0, 1.50),
    ("claude-opus-4", 15.0, 75.0, 1.50),
    ("claude-sonnet-4-5", 3.0, 15.0, 0.30),
    ("claude-sonnet-4", 3.0, 15.0, 0.30),
    ("claude-3-7-sonnet", 3.0, 15.0, 0.30),
    ("claude-haiku-4-5", 1.0, 5.0, 0.10),
    ("claude-3-5-haiku", 0.80, 4.0, 0.08),
    ("gemini-3-pro-preview", 2.0, 12.0, 0.20),
    ("gemini-3-flash-preview", 0.50, 3.0, 0.05),
    ("gemini-2.5-pro", 1.25, 10.0, 0.125),
    ("gemini-2.5-flash", 0.30, 2.50, 0.03),
    ("gemini-2.5-flash-lite", 0.10, 0.40, 0.01),
    ("gemini-2.0-flash", 0.10, 0.40, 0.025),
];

/// The built-in price of a model of a built-in provider, if known: the
/// provider's row says how the table knows its model names.
/// OpenRouter names (`anthropic/claude-sonnet-4.5`) are looked up by their
/// last part, with dots read as dashes.
pub(crate) fn builtin_price(provider: &str, model: &str) -> Option<Pricing> {
    let name = match builtin(provider)?.prices {
        PriceNames::Unpriced => return None,
        PriceNames::Vendor => model.to_string(),
        PriceNames::Bedrock => bedrock_name(model).to_string(),
        PriceNames::OpenRouter => model.rsplit('/').next().unwrap_or(model).replace('.', "-"),
    };
    TABLE
        .iter()
        .filter(|(prefix, ..)| {
            name == *prefix
                || (name.starts_with(prefix)
                    && name[prefix.len()..].starts_with('-')
                    && name[prefix.len() + 1..].starts_with(|c: char| c.is_ascii_digit()))
                // Vertex AI's ids: `claude-sonnet-4-5@20250929`.
                || (name.starts_with(prefix) && name[prefix.len()..].starts_with('@'))
        })
        .max_by_key(|(prefix, ..)| prefix.len())
        .map(|&(_, input, output, cached_input)| Pricing {
            input,
            output,
            cached_input,
        })
}

/// A Bedrock model id as the vendor's model name: without the inference
/// profile's region (`us.`, `eu.`, `apac.`, `global.` ...), the vendor
/// (`anthropic.`) and the version (`-v1:0`), so
/// `us.anthropic.claude-sonnet-4-5-20250929-v1:0` is
/// `claude-sonnet-4-5-20250929`.
fn bedrock_name(id: &str) -> &str {
    let mut name = id;
    for region in [
        "us.", "eu.", "apac.", "global.", "us-gov.", "jp.", "au.", "ca.",
    ] {
        if let Some(rest) = name.strip_prefix(region) {
            name = rest;
            break;
        }
    }
    name = name.strip_prefix("anthropic.").unwrap_or(name);
    match name.rfind("-v") {
        Some(at) if name[at + 2..].starts_with(|c: char| c.is_ascii_digit()) => &name[..at],
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_and_dated_names() {
        assert_eq!(builtin_price("openai", "gpt-5").unwrap().input, 1.25);
        assert_eq!(builtin_price("openai", "gpt-5-mini").unwrap().input, 0.25);
        assert_eq!(
            builtin_price("anthropic", "claude-sonnet-4-5-20250929")
                .unwrap()
                .output,
            15.0
        );
        assert_eq!(
            builtin_price("openrouter", "anthropic/claude-sonnet-4.5")
                .unwrap()
                .input,
            3.0
        );
        for id in [
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "anthropic.claude-sonnet-4-5-20250929-v1:0",
            "apac.anthropic.claude-sonnet-4-5-20250929-v1:0",
        ] {
            assert_eq!(
                builtin_price("bedrock", id),
                builtin_price("anthropic", "claude-sonnet-4-5"),
                "{id}"
            );
        }
        assert_eq!(
            builtin_price("bedrock", "eu.anthropic.claude-haiku-4-5-20251001-v1:0")
                .unwrap()
                .input,
            1.0
        );
        assert!(builtin_price("bedrock", "meta.llama3-70b-instruct-v1:0").is_none());
        assert!(builtin_price("openai", "gpt-5-turbo-unknown").is_none());
        assert!(builtin_price("ollama", "gpt-5").is_none());
        assert!(builtin_price("script", "gpt-5").is_none());
    }

    #[test]
    fn google_models_and_vertex_ids() {
        assert_eq!(
            builtin_price("vertex", "claude-sonnet-4-5@20250929"),
            builtin_price("anthropic", "claude-sonnet-4-5")
        );
        assert_eq!(
            builtin_price("gemini", "gemini-2.5-flash").unwrap().output,
            2.50
        );
        assert_eq!(
            builtin_price("gemini", "gemini-2.5-flash-lite")
                .unwrap()
                .input,
            0.10
        );
        assert_eq!(
            builtin_price("vertex", "gemini-2.5-pro").unwrap().input,
            1.25
        );
        assert!(builtin_price("gemini", "gemini-9").is_none());
    }

    #[test]
    fn cost_counts_cached_input_at_its_price() {
        let p = Pricing {
            input: 2.0,
            output: 8.0,
            cached_input: 0.5,
        };
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 500_000,
            cached_input_tokens: 400_000,
        };
        let cost = p.cost(&usage);
        assert!((cost - (1.2 + 0.2 + 4.0)).abs() < 1e-9, "{cost}");
    }
}
