//! Reading a reply cap out of a vendor's refusal (SPEC 4 "Reply caps per
//! member"): a 400 that says the request's reply budget is above the
//! model's maximum, and names that maximum. The wordings, as the vendors
//! send them:
//!
//! - OpenAI: `max_tokens is too large: 20000. This model supports at most
//!   16384 completion tokens, whereas you provided 20000.` (and the same
//!   with `max_completion_tokens`);
//! - Anthropic: `max_tokens: 64001 > 64000, which is the maximum allowed
//!   number of output tokens for claude-opus-4-1-20250805`;
//! - OpenAI-compatible servers and gateways: `max_tokens must be less than
//!   or equal to 8192`, `the valid range of max_tokens is [1, 8192]`.
//!
//! A message that names no number is not a cap; nor is one about the
//! context window (that is an overflow) or about anything but the reply
//! budget's own parameter. Parsing is one pass over a message the HTTP
//! layer has already bounded.

/// The names a reply budget goes by on the wire.
const BUDGET_PARAMS: &[&str] = &["max_tokens", "max_completion_tokens", "max_output_tokens"];

/// The cap a refusal names, if it is one.
pub(crate) fn named_cap(message: &str) -> Option<u32> {
    let lower = message.to_ascii_lowercase();
    let param = BUDGET_PARAMS.iter().find_map(|p| lower.find(p))?;
    let after = &lower[param..];
    if after.contains("context") {
        return None;
    }
    let cap = if let Some(at) = after.find("supports at most ") {
        number_at(&after[at + "supports at most ".len()..])
    } else if after.contains("maximum allowed") {
        after.find('>').and_then(|at| number_at(&after[at + 1..]))
    } else if let Some(at) = after.find("less than or equal to ") {
        number_at(&after[at + "less than or equal to ".len()..])
    } else if let Some(at) = after.find('[') {
        let range = &after[at + 1..];
        range
            .find(',')
            .and_then(|comma| number_at(&range[comma + 1..]))
    } else {
        None
    }?;
    (cap > 0).then_some(cap)
}

/// The decimal number at the start of `text` (after spaces).
fn number_at(text: &str) -> Option<u32> {
    let text = text.trim_start();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 10 {
        return None;
    }
    text[..digits].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendors_wordings_name_their_caps() {
        let openai = "max_tokens is too large: 20000. This model supports at most 16384 completion tokens, whereas you provided 20000.";
        assert_eq!(named_cap(openai), Some(16384));
        let completion = "max_completion_tokens is too large: 200000. This model supports at most 100000 completion tokens, whereas you provided 200000.";
        assert_eq!(named_cap(completion), Some(100_000));
        let anthropic = "max_tokens: 64001 > 64000, which is the maximum allowed number of output tokens for claude-opus-4-1-20250805";
        assert_eq!(named_cap(anthropic), Some(64000));
        assert_eq!(
            named_cap("max_tokens must be less than or equal to 8192"),
            Some(8192)
        );
        assert_eq!(
            named_cap("invalid max_tokens value, the valid range of max_tokens is [1, 8192]"),
            Some(8192)
        );
    }

    #[test]
    fn other_refusals_are_not_caps() {
        for message in [
            "This model's maximum context length is 8192 tokens. However, you requested 8256 tokens (64 in the messages, 8192 in the completion).",
            "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length",
            "`max_tokens` must be greater than `thinking.budget_tokens` (24576)",
            "max_tokens is too large",
            "max_tokens: 64001 > lots, which is the maximum allowed number of output tokens",
            "temperature: Input should be less than or equal to 1",
            "model: claude-not-a-real-model",
            "max_tokens must be less than or equal to 0",
            "max_tokens must be less than or equal to 99999999999",
            "",
        ] {
            assert_eq!(named_cap(message), None, "{message}");
        }
    }

    #[test]
    fn a_long_message_is_read_in_one_pass() {
        let long = format!("max_tokens {}", "[".repeat(1 << 20));
        assert_eq!(named_cap(&long), None);
    }
}
