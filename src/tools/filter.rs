//! Config `tools: {allow, deny}` (SPEC 3, 11): which tools are offered.
//! Entries are tool names or globs (`mcp__docs__*`); `submit` is always
//! offered. A name that matches no tool is a config error with the closest
//! valid name ("did you mean"), caught before any request.

use globset::{Glob, GlobMatcher};

use crate::suggest::closest;

/// The built-in tools, `delegate` and `submit` included.
pub(crate) const BUILTIN_TOOLS: &[&str] = &[
    "bash",
    "read_file",
    "write_file",
    "edit_file",
    "list_files",
    "grep",
    "plan",
    "delegate",
    "submit",
];

/// The tool that ends a run, always offered.
const SUBMIT: &str = "submit";

/// Which tools a run offers.
#[derive(Debug, Clone, Default)]
pub(crate) struct ToolFilter {
    /// `None`: every tool; else only those matching one entry.
    allow: Option<Vec<GlobMatcher>>,
    deny: Vec<GlobMatcher>,
}

impl ToolFilter {
    /// Checks and compiles config `tools: {allow, deny}` against the
    /// built-in tools and the configured MCP servers.
    pub(crate) fn new<'a>(
        allow: Option<&[String]>,
        deny: &[String],
        mcp_servers: impl IntoIterator<Item = &'a String> + Clone,
    ) -> Result<ToolFilter, FilterError> {
        let compile = |key: &'static str, entries: &[String]| {
            entries
                .iter()
                .map(|entry| {
                    check_entry(entry, mcp_servers.clone())
                        .map_err(|problem| FilterError::Entry { key, problem })?;
                    Glob::new(entry)
                        .map(|g| g.compile_matcher())
                        .map_err(|e| FilterError::Glob {
                            key,
                            entry: entry.clone(),
                            error: e.to_string(),
                        })
                })
                .collect::<Result<Vec<GlobMatcher>, FilterError>>()
        };
        if deny.iter().any(|d| d == SUBMIT) {
            return Err(FilterError::SubmitDenied);
        }
        Ok(ToolFilter {
            allow: allow.map(|a| compile("allow", a)).transpose()?,
            deny: compile("deny", deny)?,
        })
    }

    /// Whether the tool `name` is offered.
    pub(crate) fn allows(&self, name: &str) -> bool {
        if name == SUBMIT {
            return true;
        }
        let allowed = self
            .allow
            .as_ref()
            .is_none_or(|a| a.iter().any(|g| g.is_match(name)));
        allowed && !self.deny.iter().any(|g| g.is_match(name))
    }
}

fn is_glob(entry: &str) -> bool {
    entry.contains(['*', '?', '[', '{'])
}

/// A `tools:` entry that names nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EntryProblem {
    #[error("'{entry}': no MCP server '{server}' is configured{hint}")]
    NoServer {
        entry: String,
        server: String,
        hint: String,
    },
    #[error("unknown tool '{entry}' ({hint}tools are {}, and mcp__<server>__<tool>)", BUILTIN_TOOLS.join(", "))]
    UnknownTool { entry: String, hint: String },
}

/// Config `tools:` that cannot be used; the message names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FilterError {
    #[error("config tools.{key}: {problem}")]
    Entry {
        key: &'static str,
        problem: EntryProblem,
    },
    #[error("config tools.{key}: '{entry}': {error}")]
    Glob {
        key: &'static str,
        entry: String,
        error: String,
    },
    #[error("config tools.deny: 'submit' is always offered and cannot be denied")]
    SubmitDenied,
}

/// An entry must name a built-in tool or an MCP server of the config.
fn check_entry<'a>(
    entry: &str,
    mcp_servers: impl IntoIterator<Item = &'a String>,
) -> Result<(), EntryProblem> {
    if let Some(rest) = entry.strip_prefix("mcp__") {
        let server = rest.split("__").next().unwrap_or("");
        let servers: Vec<&String> = mcp_servers.into_iter().collect();
        if is_glob(server) || servers.iter().any(|s| *s == server) {
            return Ok(());
        }
        let hint = closest(server, servers.iter().map(|s| s.as_str()))
            .map(|s| format!(" (did you mean mcp__{s}__...?)"))
            .unwrap_or_default();
        return Err(EntryProblem::NoServer {
            entry: entry.to_string(),
            server: server.to_string(),
            hint,
        });
    }
    let matches_builtin = if is_glob(entry) {
        Glob::new(entry)
            .map(|g| g.compile_matcher())
            .is_ok_and(|g| BUILTIN_TOOLS.iter().any(|t| g.is_match(t)))
    } else {
        BUILTIN_TOOLS.contains(&entry)
    };
    if matches_builtin {
        return Ok(());
    }
    let hint = closest(entry, BUILTIN_TOOLS.iter().copied())
        .map(|s| format!("did you mean '{s}'? "))
        .unwrap_or_default();
    Err(EntryProblem::UnknownTool {
        entry: entry.to_string(),
        hint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(allow: Option<&[&str]>, deny: &[&str]) -> Result<ToolFilter, FilterError> {
        let allow: Option<Vec<String>> = allow.map(|a| a.iter().map(|s| s.to_string()).collect());
        let deny: Vec<String> = deny.iter().map(|s| s.to_string()).collect();
        ToolFilter::new(allow.as_deref(), &deny, &["docs".to_string()])
    }

    #[test]
    fn allow_then_deny_and_submit_always() {
        let f = filter(
            Some(&["read_file", "grep", "mcp__docs__*"]),
            &["mcp__docs__delete"],
        )
        .unwrap();
        assert!(f.allows("read_file") && f.allows("grep") && f.allows("submit"));
        assert!(!f.allows("bash") && !f.allows("write_file"));
        assert!(f.allows("mcp__docs__search"));
        assert!(!f.allows("mcp__docs__delete"));
        let f = filter(None, &["bash", "*_file"]).unwrap();
        assert!(!f.allows("bash") && !f.allows("write_file") && f.allows("grep"));
        assert!(ToolFilter::default().allows("anything"));
    }

    #[test]
    fn unknown_names_say_did_you_mean() {
        let e = filter(None, &["write_fiel"]).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "config tools.deny: unknown tool 'write_fiel' (did you mean 'write_file'?"
            ),
            "{e}"
        );
        let e = filter(Some(&["mcp__dcs__*"]), &[]).unwrap_err().to_string();
        assert!(
            e.contains("no MCP server 'dcs'") && e.contains("did you mean mcp__docs__"),
            "{e}"
        );
        let e = filter(None, &["zzz*"]).unwrap_err().to_string();
        assert!(e.contains("unknown tool 'zzz*'"), "{e}");
        let e = filter(None, &["submit"]).unwrap_err().to_string();
        assert!(e.contains("always offered"), "{e}");
    }
}
