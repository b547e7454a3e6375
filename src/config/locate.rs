//! Where a setting was written: the checks made once the config files are
//! laid over each other (a limit of 0, a budget that repeats another, an
//! unknown tool) name the key (`config step_limit: …`), and this finds
//! the last file that sets it and the line, as the parser's own errors
//! say them. Only on the error path: each file is read again.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::read::Spot;

/// What the error a search raises at the node it looks for expects; the
/// parser reports the node's position with it.
const HERE: &str = "tinyagent: the node looked for";

/// One step of a key path: `budgets[1].model` is `budgets`, 1, `model`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// `message` (`config <key path>: …`) with where the key was set, `(FILE
/// at line L column C)`, when one of `layers` (later ones win) sets it;
/// `None` when the message names no key path or no file sets it.
pub(crate) fn locate(message: &str, layers: &[PathBuf]) -> Option<String> {
    let rest = message.strip_prefix("config ")?;
    let (path, _) = rest.split_once(": ")?;
    let steps = steps(path)?;
    layers.iter().rev().find_map(|file| {
        let at = find(&std::fs::read_to_string(file).ok()?, &steps)?;
        Some(format!("{message} ({}{at})", file.display()))
    })
}

/// The steps of `retry.jitter`, `budgets[1]`, `mcp_servers.docs.tool_timeout`;
/// `None` for anything else (a file name, words).
fn steps(path: &str) -> Option<Vec<Step>> {
    let mut steps = Vec::new();
    for part in path.split('.') {
        let (key, mut indexes) = match part.split_once('[') {
            Some((key, rest)) => (key, Some(rest)),
            None => (part, None),
        };
        let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-');
        if key.is_empty() || !key.chars().all(plain) {
            return None;
        }
        steps.push(Step::Key(key.to_string()));
        while let Some(rest) = indexes {
            let (n, after) = rest.split_once(']')?;
            steps.push(Step::Index(n.parse().ok()?));
            indexes = match after {
                "" => None,
                more => Some(more.strip_prefix('[')?),
            };
        }
    }
    Some(steps)
}

/// Where in `text` the node at `steps` is.
fn find(text: &str, steps: &[Step]) -> Option<Spot> {
    let de = serde_yaml::Deserializer::from_str(text);
    let error = Find(steps).deserialize(de).err()?;
    if !error.to_string().contains(HERE) {
        return None;
    }
    let at = error.location()?;
    Some(Spot {
        line: at.line(),
        column: at.column(),
    })
}

/// Refuses any node: an error naming `HERE`, at the node's position.
struct Here;

impl Visitor<'_> for Here {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(HERE)
    }
}

/// Walks to the node at its steps and stops there with `HERE`.
struct Find<'a>(&'a [Step]);

impl<'de> DeserializeSeed<'de> for Find<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.0.is_empty() {
            // Refused as it is read, so the parser says where it starts.
            return d.deserialize_any(Here);
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Find<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<serde_yaml::Value>()? {
            let hit = matches!(&self.0[0], Step::Key(k) if key.as_str() == Some(k));
            if hit {
                map.next_value_seed(Find(&self.0[1..]))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            let more = if self.0[0] == Step::Index(i) {
                seq.next_element_seed(Find(&self.0[1..]))?.is_some()
            } else {
                seq.next_element::<IgnoredAny>()?.is_some()
            };
            if !more {
                return Ok(());
            }
            i += 1;
        }
    }

    // A scalar where the path goes deeper: not there.
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// The files a run's config was read from, in the order they were laid:
/// the user config (when it exists), then each `-c FILE`.
pub(crate) fn layers(user: Option<&Path>, files: &[PathBuf]) -> Vec<PathBuf> {
    user.filter(|p| p.is_file())
        .map(Path::to_path_buf)
        .into_iter()
        .chain(files.iter().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_paths_read_as_steps() {
        let key = |k: &str| Step::Key(k.into());
        assert_eq!(steps("step_limit"), Some(vec![key("step_limit")]));
        assert_eq!(
            steps("budgets[1].model"),
            Some(vec![key("budgets"), Step::Index(1), key("model")])
        );
        assert_eq!(steps("/tmp/c.yaml"), None);
        assert_eq!(steps("a b"), None);
        assert_eq!(steps("x[y]"), None);
    }

    #[test]
    fn the_node_is_found_in_block_and_flow_forms() {
        let text = "model: a/b\nretry:\n  jitter: 20\nbudgets:\n  - {usd: 5, per: day}\n  - {usd: 0, per: day}\n";
        let at = |path: &str| find(text, &steps(path).unwrap()).map(|s| s.line);
        assert_eq!(at("retry.jitter"), Some(3));
        assert_eq!(at("budgets[1]"), Some(6));
        assert_eq!(at("budgets[1].usd"), Some(6));
        assert_eq!(at("model"), Some(1));
        assert_eq!(at("step_limit"), None);
        assert_eq!(at("model.deeper"), None);
        assert_eq!(at("budgets[5]"), None);
    }

    #[test]
    fn the_last_file_that_sets_the_key_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let one = dir.path().join("one.yaml");
        let two = dir.path().join("two.yaml");
        std::fs::write(&one, "step_limit: 0\n").unwrap();
        std::fs::write(&two, "model: a/b\n\nstep_limit: 0\n").unwrap();
        let message = "config step_limit: a limit of 0 is a usage error";
        let located = locate(message, &[one.clone(), two.clone()]).unwrap();
        assert_eq!(
            located,
            format!("{message} ({} at line 3 column 13)", two.display())
        );
        let located = locate(message, std::slice::from_ref(&one)).unwrap();
        assert!(
            located.ends_with("one.yaml at line 1 column 13)"),
            "{located}"
        );
        assert_eq!(
            locate("config /x.yaml: bad", std::slice::from_ref(&one)),
            None
        );
        assert_eq!(locate("fallback model 'x': bad", &[one]), None);
    }
}
