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
    /// Price of input tokens written to a prompt cache with the default
    /// lifetime; the input price when unknown. A one-hour write costs
    /// `ONE_HOUR_WRITE` times this.
    pub cache_write: f64,
}

/// What a one-hour cache write costs against a default-lifetime one: the
/// vendors bill 2x the input for the first and 1.25x for the second.
pub(crate) const ONE_HOUR_WRITE: f64 = 1.6;

impl Pricing {
    /// The cost of one response. `usage.input_tokens` counts all input
    /// tokens: the uncached ones at the input price, cache reads at the
    /// cached price, cache writes at the write price (one-hour writes at
    /// `ONE_HOUR_WRITE` times it). Whatever the counts or the prices say,
    /// never negative and never NaN.
    pub(crate) fn cost(&self, usage: &Usage) -> f64 {
        let u = usage.bounded();
        let fresh = u.input_tokens - u.cached_input_tokens - u.cache_write_tokens;
        let write_1h = u.cache_write_1h_tokens;
        let write_default = u.cache_write_tokens - write_1h;
        let usd = (fresh as f64 * self.input
            + u.cached_input_tokens as f64 * self.cached_input
            + write_default as f64 * self.cache_write
            + write_1h as f64 * self.cache_write * ONE_HOUR_WRITE
            + u.output_tokens as f64 * self.output)
            / 1_000_000.0;
        // `max` also turns a NaN (from a NaN price) into 0.
        usd.max(0.0)
    }
}

/// (model name prefix, input, output, cached input, cache write), USD per
/// million tokens as each vendor publishes them. Longest prefix wins, so
/// dated snapshots (`claude-sonnet-4-5-20250929`) find their family.
/// Claude's cache reads cost a tenth of the input and its default (5-minute)
/// writes 1.25 times it, on the Anthropic API, Bedrock and Vertex alike;
/// OpenAI, Azure OpenAI and Gemini bill no more for a write than for input.
const TABLE: &[(&str, f64, f64, f64, f64)] = &[
    ("gpt-5", 1.25, 10.0, 0.125, 1.25),
    ("gpt-5-mini", 0.25, 2.0, 0.025, 0.25),
    ("gpt-5-nano", 0.05, 0.40, 0.005, 0.05),
    ("gpt-5-codex", 1.25, 10.0, 0.125, 1.25),
    ("gpt-4.1", 2.0, 8.0, 0.50, 2.0),
    ("gpt-4.1-mini", 0.40, 1.60, 0.10, 0.4),
    ("gpt-4.1-nano", 0.10, 0.40, 0.025, 0.1),
    ("gpt-4o", 2.50, 10.0, 1.25, 2.5),
    ("gpt-4o-mini", 0.15, 0.60, 0.075, 0.15),
    ("o3", 2.0, 8.0, 0.50, 2.0),
    ("o3-mini", 1.10, 4.40, 0.55, 1.1),
    ("o4-mini", 1.10, 4.40, 0.275, 1.1),
    ("claude-opus-4-5", 5.0, 25.0, 0.50, 6.25),
    ("claude-opus-4-1", 15.0, 75.0, 1.50, 18.75),
    ("claude-opus-4", 15.0, 75.0, 1.50, 18.75),
    ("claude-sonnet-4-5", 3.0, 15.0, 0.30, 3.75),
    ("claude-sonnet-4", 3.0, 15.0, 0.30, 3.75),
    ("claude-3-7-sonnet", 3.0, 15.0, 0.30, 3.75),
    ("claude-haiku-4-5", 1.0, 5.0, 0.10, 1.25),
    ("claude-3-5-haiku", 0.80, 4.0, 0.08, 1.0),
    ("gemini-3-pro-preview", 2.0, 12.0, 0.20, 2.0),
    ("gemini-3-flash-preview", 0.50, 3.0, 0.05, 0.5),
    ("gemini-2.5-pro", 1.25, 10.0, 0.125, 1.25),
    ("gemini-2.5-flash", 0.30, 2.50, 0.03, 0.3),
    ("gemini-2.5-flash-lite", 0.10, 0.40, 0.01, 0.1),
    ("gemini-2.0-flash", 0.10, 0.40, 0.025, 0.1),
    // Amazon Nova, on Bedrock only: reads at a quarter of the input, writes
    // at the input price.
    ("nova-premier", 2.50, 12.50, 0.625, 2.50),
    ("nova-pro", 0.80, 3.20, 0.20, 0.80),
    ("nova-lite", 0.06, 0.24, 0.015, 0.06),
    ("nova-micro", 0.035, 0.14, 0.00875, 0.035),
];

/// Models that Bedrock bills 10% more through a geographic cross-region
/// profile (`us.`, `eu.`, `apac.` ...) or in one region than through the
/// `global.` profile, and Vertex AI through a regional or multi-region
/// endpoint than through the global one; the global price is the
/// Anthropic API's.
const BEDROCK_REGIONAL: &[&str] = &["claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-5"];
/// The factor of that premium, on every price (reads and writes included).
const BEDROCK_REGIONAL_FACTOR: f64 = 1.1;

/// The built-in price of `model` on Vertex AI in `region` (`global` or a
/// location): the table's, with the regional premium where one applies.
pub(crate) fn vertex_price(model: &str, region: &str) -> Option<Pricing> {
    let price = builtin_price("vertex", model)?;
    let family = model.split('@').next().unwrap_or(model);
    if region == "global" || !BEDROCK_REGIONAL.contains(&family) {
        return Some(price);
    }
    let f = BEDROCK_REGIONAL_FACTOR;
    Some(Pricing {
        input: price.input * f,
        output: price.output * f,
        cached_input: price.cached_input * f,
        cache_write: price.cache_write * f,
    })
}

/// The built-in price of a model of a built-in provider, if known: the
/// provider's row says how the table knows its model names.
/// OpenRouter names (`anthropic/claude-sonnet-4.5`) are looked up by their
/// last part, with dots read as dashes.
pub(crate) fn builtin_price(provider: &str, model: &str) -> Option<Pricing> {
    let names = builtin(provider)?.prices;
    let regional = matches!(names, PriceNames::Bedrock) && !model.starts_with("global.");
    let name = match names {
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
        .map(|&(prefix, input, output, cached_input, cache_write)| {
            let factor = if regional && BEDROCK_REGIONAL.contains(&prefix) {
                BEDROCK_REGIONAL_FACTOR
            } else {
                1.0
            };
            Pricing {
                input: input * factor,
                output: output * factor,
                cached_input: cached_input * factor,
                cache_write: cache_write * factor,
            }
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
    name = name.strip_prefix("amazon.").unwrap_or(name);
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
        // The global profile costs what the Anthropic API does; a
        // geographic profile or one region 10% more (for the 4.5 models).
        assert_eq!(
            builtin_price(
                "bedrock",
                "global.anthropic.claude-sonnet-4-5-20250929-v1:0"
            ),
            builtin_price("anthropic", "claude-sonnet-4-5"),
        );
        for id in [
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "anthropic.claude-sonnet-4-5-20250929-v1:0",
            "apac.anthropic.claude-sonnet-4-5-20250929-v1:0",
        ] {
            let p = builtin_price("bedrock", id).unwrap();
            assert!(
                (p.input - 3.3).abs() < 1e-9 && (p.output - 16.5).abs() < 1e-9,
                "{id}"
            );
            assert!((p.cached_input - 0.33).abs() < 1e-9, "{id}");
            assert!((p.cache_write - 4.125).abs() < 1e-9, "{id}");
        }
        let haiku = builtin_price("bedrock", "eu.anthropic.claude-haiku-4-5-20251001-v1:0");
        assert!((haiku.unwrap().input - 1.1).abs() < 1e-9);
        // Older models cost the same through every profile.
        assert_eq!(
            builtin_price("bedrock", "us.anthropic.claude-sonnet-4-20250514-v1:0"),
            builtin_price("anthropic", "claude-sonnet-4"),
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
            cache_write: 3.0,
        };
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 500_000,
            cached_input_tokens: 400_000,
            ..Usage::default()
        };
        let cost = p.cost(&usage);
        assert!((cost - (1.2 + 0.2 + 4.0)).abs() < 1e-9, "{cost}");
    }

    fn sonnet() -> Pricing {
        builtin_price("anthropic", "claude-sonnet-4-5").unwrap()
    }

    #[test]
    fn claude_reads_cost_a_tenth_and_writes_a_quarter_more_on_every_door() {
        for (provider, model) in [
            ("anthropic", "claude-sonnet-4-5-20250929"),
            (
                "bedrock",
                "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
            ),
            ("bedrock", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            ("vertex", "claude-sonnet-4-5@20250929"),
        ] {
            let p = builtin_price(provider, model).unwrap();
            assert!((p.cached_input - p.input * 0.1).abs() < 1e-9, "{model}");
            assert!((p.cache_write - p.input * 1.25).abs() < 1e-9, "{model}");
        }
        let opus = builtin_price("anthropic", "claude-opus-4-1").unwrap();
        assert_eq!((opus.cached_input, opus.cache_write), (1.5, 18.75));
        // OpenAI and Gemini bill a write as input.
        let gpt = builtin_price("azure", "gpt-4o-2024-11-20").unwrap();
        assert_eq!((gpt.cached_input, gpt.cache_write), (1.25, 2.5));
        let flash = builtin_price("vertex", "gemini-2.5-flash").unwrap();
        assert_eq!((flash.cached_input, flash.cache_write), (0.03, 0.30));
    }

    #[test]
    fn vertex_regional_endpoints_cost_more_for_the_4_5_models() {
        let global = vertex_price("claude-sonnet-4-5@20250929", "global").unwrap();
        assert_eq!(
            Some(global),
            builtin_price("anthropic", "claude-sonnet-4-5")
        );
        let regional = vertex_price("claude-sonnet-4-5@20250929", "us-east5").unwrap();
        assert!((regional.input - 3.3).abs() < 1e-9);
        assert!((regional.cache_write - 4.125).abs() < 1e-9);
        assert_eq!(
            vertex_price("claude-sonnet-4@20250514", "us-east5"),
            builtin_price("anthropic", "claude-sonnet-4")
        );
        assert_eq!(
            vertex_price("gemini-2.5-pro", "europe-west1"),
            builtin_price("gemini", "gemini-2.5-pro")
        );
        assert_eq!(vertex_price("claude-9", "global"), None);
    }

    #[test]
    fn nova_on_bedrock_reads_at_a_quarter() {
        for id in ["amazon.nova-pro-v1:0", "us.amazon.nova-pro-v1:0"] {
            let p = builtin_price("bedrock", id).unwrap();
            assert_eq!(
                (p.input, p.output, p.cached_input, p.cache_write),
                (0.80, 3.20, 0.20, 0.80)
            );
        }
        assert_eq!(
            builtin_price("bedrock", "eu.amazon.nova-micro-v1:0")
                .unwrap()
                .input,
            0.035
        );
        assert_eq!(
            builtin_price("bedrock", "amazon.nova-lite-v1:0")
                .unwrap()
                .cached_input,
            0.015
        );
    }

    #[test]
    fn cost_prices_fresh_input_reads_writes_and_one_hour_writes_apart() {
        let p = sonnet();
        // 100k input: 60k read, 30k written (10k of them for an hour), 10k fresh.
        let usage = Usage {
            input_tokens: 100_000,
            output_tokens: 1_000,
            cached_input_tokens: 60_000,
            cache_write_tokens: 30_000,
            cache_write_1h_tokens: 10_000,
        };
        let expected = (10_000.0 * 3.0
            + 60_000.0 * 0.30
            + 20_000.0 * 3.75
            + 10_000.0 * 3.75 * 1.6
            + 1_000.0 * 15.0)
            / 1e6;
        let cost = p.cost(&usage);
        assert!((cost - expected).abs() < 1e-12, "{cost} vs {expected}");
        // A one-hour write costs twice the input, as Anthropic bills it.
        let one_hour = Usage {
            input_tokens: 1_000_000,
            cache_write_tokens: 1_000_000,
            cache_write_1h_tokens: 1_000_000,
            ..Usage::default()
        };
        assert!((p.cost(&one_hour) - 6.0).abs() < 1e-9);
    }

    #[test]
    fn counts_that_lie_never_make_a_cost_negative_or_unbounded() {
        let p = sonnet();
        // Reads larger than the input: all of the input at the read price.
        let over = Usage {
            input_tokens: 1_000,
            cached_input_tokens: 5_000,
            cache_write_tokens: 9_000,
            cache_write_1h_tokens: 99_000,
            ..Usage::default()
        };
        assert!((p.cost(&over) - 1_000.0 * 0.30 / 1e6).abs() < 1e-15);
        // Writes past what the reads leave: cut to the rest.
        let writes = Usage {
            input_tokens: 1_000,
            cached_input_tokens: 400,
            cache_write_tokens: 5_000,
            ..Usage::default()
        };
        assert!((p.cost(&writes) - (400.0 * 0.30 + 600.0 * 3.75) / 1e6).abs() < 1e-15);
        let absurd = Usage {
            input_tokens: u64::MAX,
            output_tokens: u64::MAX,
            cached_input_tokens: u64::MAX,
            cache_write_tokens: u64::MAX,
            cache_write_1h_tokens: u64::MAX,
        };
        let cost = p.cost(&absurd);
        assert!(cost.is_finite() && cost > 0.0, "{cost}");
        let negative = Pricing {
            input: -3.0,
            output: f64::NAN,
            cached_input: -1.0,
            cache_write: -2.0,
        };
        let usage = Usage {
            input_tokens: 10,
            output_tokens: 10,
            ..Usage::default()
        };
        assert_eq!(negative.cost(&usage), 0.0);
    }
}
