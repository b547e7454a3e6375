//! The setup error (exit 2) and the environment reader that every stage
//! before the first request shares. A leaf module: it imports nothing of ours.

/// A usage, config or validation error (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SetupError(pub String);

/// Reads environment variables; a parameter so tests need no global state.
pub(crate) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment.
pub(crate) fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// An environment of fixed variables (tests).
#[cfg(test)]
pub(crate) fn fixed_env(
    vars: &'static [(&'static str, &'static str)],
) -> impl Fn(&str) -> Option<String> {
    move |k: &str| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}
