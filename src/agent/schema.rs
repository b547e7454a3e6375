//! `--output-schema`: loading and compiling the JSON Schema, and checking a
//! final answer (a `submit` output or the text of a reply without tool
//! calls) against it.

use std::path::Path;

use serde_json::Value;

/// Most validation errors quoted back to the model.
const MAX_ERRORS_SHOWN: usize = 10;

/// A compiled output schema.
pub(crate) struct OutputSchema {
    /// The schema document as read (also sent to providers).
    pub value: Value,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSchema")
            .field("value", &self.value)
            .finish_non_exhaustive()
    }
}

/// An `--output-schema` file that cannot be used; the message names it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SchemaFileError {
    #[error("--output-schema {}: cannot read: {error}", path.display())]
    Unreadable {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error("--output-schema {}: not valid JSON: {error}", path.display())]
    NotJson {
        path: std::path::PathBuf,
        error: serde_json::Error,
    },
    #[error("--output-schema {}: {problem}", path.display())]
    Invalid {
        path: std::path::PathBuf,
        problem: SchemaProblem,
    },
}

/// A schema document that is not a usable JSON Schema.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SchemaProblem {
    #[error("not a JSON Schema: expected an object")]
    NotAnObject,
    /// The validator's complaint, on one line.
    #[error("not a valid JSON Schema: {0}")]
    Invalid(String),
}

/// Why a final answer is refused under the output schema.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum AnswerProblem {
    #[error("the answer is not JSON; reply with only a JSON value that matches the output schema")]
    NotJson,
    /// The validation errors, one line each.
    #[error("{}", describe(.0))]
    Mismatch(Vec<String>),
}

impl OutputSchema {
    /// Reads and compiles the schema at `path`; the error is one line naming
    /// the file.
    pub(crate) fn load(path: &Path) -> Result<OutputSchema, SchemaFileError> {
        let at = || path.to_path_buf();
        let text = std::fs::read_to_string(path)
            .map_err(|error| SchemaFileError::Unreadable { path: at(), error })?;
        let value: Value = serde_json::from_str(&text)
            .map_err(|error| SchemaFileError::NotJson { path: at(), error })?;
        Self::compile(value).map_err(|problem| SchemaFileError::Invalid {
            path: at(),
            problem,
        })
    }

    /// Compiles a schema document (checked against its meta-schema).
    pub(crate) fn compile(value: Value) -> Result<OutputSchema, SchemaProblem> {
        if !(value.is_object() || value.is_boolean()) {
            return Err(SchemaProblem::NotAnObject);
        }
        let validator = jsonschema::validator_for(&value)
            .map_err(|e| SchemaProblem::Invalid(one_line(&e.to_string())))?;
        Ok(OutputSchema { value, validator })
    }

    /// The validation errors of `instance`, one line each (empty when valid).
    pub(crate) fn errors(&self, instance: &Value) -> Vec<String> {
        self.validator
            .iter_errors(instance)
            .map(|e| {
                let path = e.instance_path.to_string();
                let at = if path.is_empty() {
                    "(root)".to_string()
                } else {
                    path
                };
                format!("at {at}: {}", one_line(&e.to_string()))
            })
            .collect()
    }

    /// Checks a `submit` output. A string that holds JSON valid against the
    /// schema is accepted as that JSON (models often send JSON as text).
    pub(crate) fn check_submitted(&self, output: &Value) -> Result<Value, AnswerProblem> {
        let errors = self.errors(output);
        if errors.is_empty() {
            return Ok(output.clone());
        }
        if let Some(parsed) = output.as_str().and_then(parse_json_text) {
            if self.errors(&parsed).is_empty() {
                return Ok(parsed);
            }
        }
        Err(AnswerProblem::Mismatch(errors))
    }

    /// Checks the text of a final reply: it must be JSON (a Markdown code
    /// fence around it is tolerated) valid against the schema.
    pub(crate) fn check_text(&self, text: &str) -> Result<Value, AnswerProblem> {
        let Some(value) = parse_json_text(text) else {
            return Err(AnswerProblem::NotJson);
        };
        let errors = self.errors(&value);
        if errors.is_empty() {
            Ok(value)
        } else {
            Err(AnswerProblem::Mismatch(errors))
        }
    }
}

/// Parses text as JSON, tolerating surrounding whitespace and a ```json fence.
fn parse_json_text(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if let Ok(v) = serde_json::from_str(trimmed) {
        return Some(v);
    }
    let inner = trimmed.strip_prefix("```")?.strip_suffix("```")?;
    let inner = inner.strip_prefix("json").unwrap_or(inner);
    serde_json::from_str(inner.trim()).ok()
}

fn describe(errors: &[String]) -> String {
    let mut text = String::from("the answer does not match the output schema:");
    for e in errors.iter().take(MAX_ERRORS_SHOWN) {
        text.push_str("\n- ");
        text.push_str(e);
    }
    if errors.len() > MAX_ERRORS_SHOWN {
        text.push_str(&format!(
            "\n- ... and {} more",
            errors.len() - MAX_ERRORS_SHOWN
        ));
    }
    text
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> OutputSchema {
        OutputSchema::compile(json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
            "additionalProperties": false
        }))
        .unwrap()
    }

    #[test]
    fn invalid_schemas_are_rejected() {
        assert!(OutputSchema::compile(json!({"type": "nonsense"})).is_err());
        assert!(OutputSchema::compile(json!([1, 2])).is_err());
        assert!(OutputSchema::compile(json!({"type": "string"})).is_ok());
    }

    #[test]
    fn remote_references_are_not_fetched() {
        let err = OutputSchema::compile(json!({"$ref": "https://example.com/schema.json"}));
        assert!(err.is_err());
    }

    #[test]
    fn submitted_values_and_json_strings() {
        let s = schema();
        assert_eq!(
            s.check_submitted(&json!({"n": 1})).unwrap(),
            json!({"n": 1})
        );
        assert_eq!(
            s.check_submitted(&json!("{\"n\": 2}")).unwrap(),
            json!({"n": 2})
        );
        let err = s
            .check_submitted(&json!({"n": "x"}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/n"), "{err}");
        assert!(s
            .check_submitted(&json!({}))
            .unwrap_err()
            .to_string()
            .contains("required"));
    }

    #[test]
    fn text_answers_must_be_json() {
        let s = schema();
        assert_eq!(s.check_text(" {\"n\": 3}\n").unwrap(), json!({"n": 3}));
        assert_eq!(
            s.check_text("```json\n{\"n\": 4}\n```").unwrap(),
            json!({"n": 4})
        );
        assert!(s
            .check_text("n is 3")
            .unwrap_err()
            .to_string()
            .contains("not JSON"));
        assert!(s.check_text("{\"n\": 1, \"m\": 2}").is_err());
    }
}
