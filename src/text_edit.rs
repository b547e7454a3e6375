//! What `edit_file` does to a file's text, in one place: the tool applies
//! it, and an approval question shows its diff before it happens.

/// Why an edit cannot be made; the text is what the model is told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EditError {
    #[error("old_string must not be empty")]
    EmptyOld,
    #[error("old_string not found in {path}")]
    NotFound { path: String },
    #[error("old_string occurs {count} times in {path}; give more context to make it unique, or set replace_all")]
    NotUnique { path: String, count: usize },
}

/// `text` with `old` replaced by `new` (every occurrence with `all`, else
/// the only one), and how many were replaced. `path` names the file in
/// errors.
pub(crate) fn replace(
    text: &str,
    old: &str,
    new: &str,
    all: bool,
    path: &str,
) -> Result<(String, usize), EditError> {
    if old.is_empty() {
        return Err(EditError::EmptyOld);
    }
    let count = text.matches(old).count();
    match (count, all) {
        (0, _) => Err(EditError::NotFound { path: path.into() }),
        (1, _) | (_, true) => Ok((text.replace(old, new), count)),
        (count, false) => Err(EditError::NotUnique {
            path: path.into(),
            count,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_occurrence_or_all_of_them() {
        assert_eq!(
            replace("a b a", "b", "c", false, "f"),
            Ok(("a c a".into(), 1))
        );
        assert_eq!(
            replace("a b a", "a", "x", true, "f"),
            Ok(("x b x".into(), 2))
        );
        assert_eq!(
            replace("a b a", "a", "x", false, "f").unwrap_err().to_string(),
            "old_string occurs 2 times in f; give more context to make it unique, or set replace_all"
        );
        assert_eq!(
            replace("a", "z", "x", false, "f"),
            Err(EditError::NotFound { path: "f".into() })
        );
        assert_eq!(replace("a", "", "x", true, "f"), Err(EditError::EmptyOld));
    }
}
