//! "Did you mean": the closest valid name to a misspelt one.

/// The candidate closest to `word`, when it is close enough to be a typo.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(word, c), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_word_and_nonsense_finds_nothing() {
        let words = ["openai", "anthropic", "ollama", "openrouter"];
        assert_eq!(closest("opneai", words), Some("openai"));
        assert_eq!(closest("antropic", words), Some("anthropic"));
        assert_eq!(closest("zzz", words), None);
        assert_eq!(
            closest("modle", ["model", "fallback_models"]),
            Some("model")
        );
    }
}
