//! Reading one config file: its size and nesting checked in one linear
//! pass before the YAML parser sees it, parsed, checked against `Config`
//! on its own (a refused value located by line and column), then laid
//! over the others (`overlay`) and checked whole (`check`); and the errors
//! that name the file and where in it.

use std::path::{Path, PathBuf};

use serde_yaml::Value;

use super::Config;

/// A config problem, naming the file.
#[derive(Debug, thiserror::Error)]
#[error("config {}: {problem}", path.display())]
pub(crate) struct ConfigError {
    pub path: PathBuf,
    pub problem: ConfigProblem,
}

/// What is wrong with one config file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigProblem {
    #[error("cannot read: {0}")]
    Unreadable(std::io::Error),
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// The parser's message, which says the line and column; `tab` when
    /// the character it stopped at is a tab.
    #[error("{error}{}", if *tab { " (a tab: YAML indents with spaces)" } else { "" })]
    Yaml { error: serde_yaml::Error, tab: bool },
    #[error("expected a mapping of keys at the top level")]
    NotAMapping,
    #[error("{error}{}", at.map(|at| at.to_string()).unwrap_or_default())]
    Key { error: KeyError, at: Option<Spot> },
}

/// Where in a file: one-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(" at line {line} column {column}")]
pub(crate) struct Spot {
    pub line: usize,
    pub column: usize,
}

impl Spot {
    /// The line and column of byte `index` of `text`.
    fn of(text: &str, index: usize) -> Spot {
        let before = &text.as_bytes()[..index.min(text.len())];
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        Spot {
            line: before.iter().filter(|&&b| b == b'\n').count() + 1,
            column: String::from_utf8_lossy(&before[line_start..])
                .chars()
                .count()
                + 1,
        }
    }
}

/// A file the YAML parser is not given: too large, or nested too deep.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ShapeError {
    #[error("the file is larger than {} MiB", MAX_CONFIG_BYTES >> 20)]
    TooLarge,
    #[error("nesting deeper than {MAX_FLOW_DEPTH} levels{at}")]
    TooDeep { at: Spot },
}

/// A value that does not fit `Config`: the key path (none at the top) and
/// serde's message, with a "did you mean" for a misspelt key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum KeyError {
    #[error("{0}")]
    Top(String),
    #[error("{path}: {message}")]
    At { path: String, message: String },
}

/// Reads one config file as YAML and checks it against `Config` on its own,
/// so an unknown key is reported with this file's name. A missing optional
/// file yields `None`.
pub(crate) fn read_layer(path: &Path, required: bool) -> Result<Option<Value>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ConfigError {
                path: path.to_path_buf(),
                problem: ConfigProblem::Unreadable(e),
            })
        }
    };
    let err = |problem: ConfigProblem| ConfigError {
        path: path.to_path_buf(),
        problem,
    };
    check_shape(&text).map_err(|e| err(e.into()))?;
    let value: Value = serde_yaml::from_str(&text).map_err(|error| {
        let tab = error
            .location()
            .is_some_and(|at| text.as_bytes().get(at.index()) == Some(&b'\t'));
        err(ConfigProblem::Yaml { error, tab })
    })?;
    let value = match value {
        Value::Null => Value::Mapping(Default::default()),
        v @ Value::Mapping(_) => v,
        _ => return Err(err(ConfigProblem::NotAMapping)),
    };
    check(&value).map_err(|error| {
        err(ConfigProblem::Key {
            error,
            at: locate(&text),
        })
    })?;
    Ok(Some(value))
}

/// Where in `text` the value `check` refused is: the same check made on
/// the text itself, whose parser knows positions (a `Value` has none).
/// Only on the error path, so a good file is parsed once.
fn locate(text: &str) -> Option<Spot> {
    let de = serde_yaml::Deserializer::from_str(text);
    let at = serde_path_to_error::deserialize::<_, Config>(de)
        .err()?
        .into_inner()
        .location()?;
    Some(Spot {
        line: at.line(),
        column: at.column(),
    })
}

/// The largest config file read.
const MAX_CONFIG_BYTES: usize = 4 << 20;
/// The deepest `[`/`{` nesting accepted; no real config comes near it.
const MAX_FLOW_DEPTH: usize = 64;

/// Refuses, in one linear pass, what the YAML parser would take quadratic
/// time over: a huge file, or `[`/`{` nested deeper than `MAX_FLOW_DEPTH`
/// (libyaml rescans every open level at each token). Brackets inside
/// quotes and comments do not count.
pub(super) fn check_shape(text: &str) -> Result<(), ShapeError> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(ShapeError::TooLarge);
    }
    let (mut depth, mut quote, mut comment, mut escaped) = (0usize, None, false, false);
    let mut prev = b'\n';
    for (i, &b) in text.as_bytes().iter().enumerate() {
        if comment {
            comment = b != b'\n';
        } else if let Some(q) = quote {
            // `\"` escapes inside double quotes; `''` inside single ones
            // closes and reopens, which comes out the same.
            if escaped {
                escaped = false;
            } else if q == b'"' && b == b'\\' {
                escaped = true;
            } else if b == q {
                quote = None;
            }
        } else {
            match b {
                // A quote opens a scalar only where one may start (in a
                // plain scalar, `don't` is just text, as YAML reads it).
                b'"' | b'\''
                    if prev.is_ascii_whitespace()
                        || matches!(prev, b'[' | b'{' | b',' | b':' | b'-') =>
                {
                    quote = Some(b)
                }
                b'#' if prev.is_ascii_whitespace() => comment = true,
                b'[' | b'{' => {
                    depth += 1;
                    if depth > MAX_FLOW_DEPTH {
                        let at = Spot::of(text, i);
                        return Err(ShapeError::TooDeep { at });
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        prev = b;
    }
    Ok(())
}

/// Deserializes a layered value into `Config`, with the key path in errors.
pub(crate) fn check(value: &Value) -> Result<Config, KeyError> {
    serde_path_to_error::deserialize(value.clone()).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let inner = match inner.split_once(", expected") {
            // An unknown value keeps the list of valid ones.
            Some((head, expected)) if head.starts_with("unknown variant") => {
                format!("{head}, expected{expected}{}", did_you_mean(head, expected))
            }
            Some((head, expected)) if head.starts_with("unknown field") => {
                format!("{head}{}", did_you_mean(head, expected))
            }
            _ => inner,
        };
        if path == "." || path.is_empty() {
            KeyError::Top(inner)
        } else {
            KeyError::At {
                path,
                message: inner,
            }
        }
    })
}

/// ` (did you mean `model`?)` for serde's "unknown field `modle`" and its
/// list of expected fields, or nothing when none is close.
fn did_you_mean(head: &str, expected: &str) -> String {
    let quoted = |text: &str| -> Vec<String> {
        text.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    let unknown = head.starts_with("unknown field") || head.starts_with("unknown variant");
    let (Some(field), true) = (quoted(head).pop(), unknown) else {
        return String::new();
    };
    let valid = quoted(expected);
    crate::suggest::closest(&field, valid.iter().map(String::as_str))
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default()
}

/// Lays `top` over `base` key by key: mappings merge recursively, anything
/// else replaces.
pub(crate) fn overlay(base: &mut Value, top: Value) {
    match (base, top) {
        (Value::Mapping(base), Value::Mapping(top)) => {
            for (key, value) in top {
                match base.get_mut(&key) {
                    Some(existing) => overlay(existing, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, top) => *base = top,
    }
}

/// The user config's path: `$TINYAGENT_CONFIG`, else
/// `$XDG_CONFIG_HOME/tinyagent/config.yaml`, else
/// `~/.config/tinyagent/config.yaml`.
pub(crate) fn user_config_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(p) = env("TINYAGENT_CONFIG").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    crate::paths::config_dir(env).map(|d| d.join("config.yaml"))
}

impl From<ConfigError> for crate::setup::SetupError {
    fn from(e: ConfigError) -> Self {
        crate::setup::SetupError(e.to_string())
    }
}
