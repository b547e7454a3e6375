//! `grep`: search file contents with a regular expression, as ripgrep does
//! (its own crates): `.gitignore` respected, hidden and binary files
//! skipped, matches as `path:line: text`, bounded in count and size.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{
    BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch,
};
use ignore::overrides::OverrideBuilder;
use ignore::WalkBuilder;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{shorten, Tool, ToolCtx, ToolOutput, MAX_OUTPUT_CHARS};
use crate::conversation::ToolSpec;

/// Matching lines reported when `max_results` is not given.
pub(crate) const DEFAULT_MAX_RESULTS: usize = 100;
/// The most matching lines one call may ask for.
pub(crate) const MAX_RESULTS_CAP: usize = 1000;
/// The most context lines around a match one call may ask for.
const MAX_CONTEXT_LINES: usize = 10;
/// Longest line shown, in characters; the rest is cut.
const MAX_LINE_CHARS: usize = 300;
/// The most memory one line may take while searching; a file with a longer
/// line is skipped.
const HEAP_LIMIT: usize = 16 * 1024 * 1024;

/// The `grep` tool's arguments (their JSON Schema is the tool's).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GrepArgs {
    /// A regular expression (Rust regex syntax, as ripgrep).
    pub pattern: String,
    /// A file or directory to search, relative to the working directory (default: the working directory).
    #[serde(default)]
    pub path: Option<String>,
    /// Only search files whose path matches this glob, e.g. `*.rs` or `src/**/*.toml`.
    #[serde(default)]
    pub glob: Option<String>,
    /// Match without regard to case.
    #[serde(default)]
    pub case_insensitive: Option<bool>,
    /// Lines of context to show before and after each match (at most 10).
    #[serde(default)]
    pub context_lines: Option<u32>,
    /// The most matching lines to report (default 100, at most 1000).
    #[serde(default)]
    pub max_results: Option<u32>,
}

/// The `grep` tool.
pub(crate) struct GrepTool;

#[async_trait]
impl Tool for GrepTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "grep".into(),
            description: "Search file contents with a regular expression, like ripgrep: .gitignore is respected, hidden and binary files are skipped. Returns matching lines as `path:line: text` (context lines as `path-line- text`).".into(),
            parameters: args_schema(),
        }
    }

    async fn run(&self, args: &Value, ctx: &ToolCtx) -> ToolOutput {
        let args: GrepArgs = match serde_json::from_value(args.clone()) {
            Ok(a) => a,
            Err(e) => return ToolOutput::err(format!("bad arguments: {e}")),
        };
        let cwd = ctx.cwd.clone();
        let root = ctx.resolve(args.path.as_deref().unwrap_or("."));
        let stop = ctx.stop.clone();
        let stopped = move || stop.pending().is_some();
        match tokio::task::spawn_blocking(move || search(&args, &root, &cwd, &stopped)).await {
            Ok(Ok(text)) => ToolOutput::ok(shorten(&text, MAX_OUTPUT_CHARS)),
            Ok(Err(e)) => ToolOutput::err(e.to_string()),
            Err(e) => ToolOutput::err(format!("grep failed: {e}")),
        }
    }
}

/// The JSON Schema of `GrepArgs` in the plain form every provider takes:
/// no meta-schema or title, optional fields as their own type.
fn args_schema() -> Value {
    let mut schema = schemars::schema_for!(GrepArgs).to_value();
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("$schema");
        obj.remove("title");
        if let Some(Value::Object(props)) = obj.get_mut("properties") {
            for prop in props.values_mut().filter_map(Value::as_object_mut) {
                prop.remove("format");
                prop.remove("default");
                if let Some(Value::Array(types)) = prop.get("type") {
                    let one: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
                    if one.len() == 1 {
                        prop.insert("type".into(), one[0].clone());
                    }
                }
            }
        }
    }
    schema
}

/// Why a search did not run: a message for the model.
#[derive(Debug, thiserror::Error)]
enum SearchError {
    #[error("invalid regular expression: {0}")]
    Regex(String),
    #[error("{}: no such file or directory", .0.display())]
    NoPath(std::path::PathBuf),
    #[error("invalid glob {glob:?}: {error}")]
    Glob { glob: String, error: String },
    #[error("interrupted")]
    Interrupted,
}

/// Runs one search; `Err` is a message for the model (bad regex, bad glob,
/// missing path).
fn search(
    args: &GrepArgs,
    root: &Path,
    cwd: &Path,
    stopped: &dyn Fn() -> bool,
) -> Result<String, SearchError> {
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(args.case_insensitive.unwrap_or(false))
        .line_terminator(Some(b'\n'))
        .build(&args.pattern)
        .map_err(|e| SearchError::Regex(e.to_string()))?;
    if !root.exists() {
        return Err(SearchError::NoPath(root.to_path_buf()));
    }
    let max = args
        .max_results
        .map_or(DEFAULT_MAX_RESULTS, |m| m as usize)
        .clamp(1, MAX_RESULTS_CAP);
    let context = args
        .context_lines
        .map_or(0, |c| c as usize)
        .min(MAX_CONTEXT_LINES);
    let mut walk = WalkBuilder::new(root);
    walk.hidden(true)
        .git_ignore(true)
        .require_git(false)
        .sort_by_file_path(|a, b| a.cmp(b));
    if let Some(glob) = &args.glob {
        let mut overrides = OverrideBuilder::new(root);
        overrides.add(glob).map_err(|e| SearchError::Glob {
            glob: glob.to_string(),
            error: e.to_string(),
        })?;
        walk.overrides(overrides.build().map_err(|e| SearchError::Glob {
            glob: glob.to_string(),
            error: e.to_string(),
        })?);
    }
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .before_context(context)
        .after_context(context)
        .binary_detection(BinaryDetection::quit(0))
        .heap_limit(Some(HEAP_LIMIT))
        .build();

    let mut out = Collector {
        lines: Vec::new(),
        matches: 0,
        max,
        files: 0,
    };
    for entry in walk.build() {
        if stopped() {
            return Err(SearchError::Interrupted);
        }
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        let mut sink = FileSink {
            shown: shown_path(path, cwd),
            lines: Vec::new(),
            matches: 0,
            left: max - out.matches,
            binary: false,
            last_line: None,
        };
        if searcher.search_path(&matcher, path, &mut sink).is_err() {
            continue; // unreadable file: skipped, as ripgrep does
        }
        if sink.binary || sink.matches == 0 {
            continue;
        }
        if context > 0 && !out.lines.is_empty() {
            out.lines.push("--".into());
        }
        out.files += 1;
        out.matches += sink.matches;
        out.lines.append(&mut sink.lines);
        if out.matches >= max {
            break;
        }
    }
    Ok(out.finish())
}

/// All files' lines, in walk order.
struct Collector {
    lines: Vec<String>,
    matches: usize,
    max: usize,
    files: usize,
}

impl Collector {
    fn finish(self) -> String {
        if self.matches == 0 {
            return "no matches".into();
        }
        let mut text = self.lines.join("\n");
        text.push('\n');
        if self.matches >= self.max {
            text.push_str(&format!(
                "[stopped after {} matching lines; narrow the pattern or path, or raise max_results]\n",
                self.max
            ));
        } else {
            text.push_str(&format!(
                "[{} matching line{} in {} file{}]\n",
                self.matches,
                if self.matches == 1 { "" } else { "s" },
                self.files,
                if self.files == 1 { "" } else { "s" },
            ));
        }
        text
    }
}

/// One file's lines; dropped whole when the file turns out to be binary.
struct FileSink {
    shown: String,
    lines: Vec<String>,
    matches: usize,
    left: usize,
    binary: bool,
    last_line: Option<u64>,
}

impl FileSink {
    fn push(&mut self, sep: char, number: Option<u64>, bytes: &[u8]) {
        let number = number.unwrap_or(0);
        if self.last_line == Some(number) {
            return;
        }
        self.last_line = Some(number);
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end_matches(['\n', '\r']);
        let line = if text.chars().count() > MAX_LINE_CHARS {
            let head: String = text.chars().take(MAX_LINE_CHARS).collect();
            format!("{head} [line cut]")
        } else {
            text.to_string()
        };
        self.lines
            .push(format!("{}{sep}{number}{sep} {line}", self.shown));
    }
}

impl Sink for FileSink {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, m: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        self.push(':', m.line_number(), m.bytes());
        self.matches += 1;
        Ok(self.matches < self.left)
    }

    fn context(&mut self, _: &Searcher, c: &SinkContext<'_>) -> Result<bool, Self::Error> {
        if !matches!(c.kind(), SinkContextKind::Other) {
            self.push('-', c.line_number(), c.bytes());
        }
        Ok(true)
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, Self::Error> {
        self.lines.push("--".into());
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _offset: u64) -> Result<bool, Self::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// A path as the model sees it: relative to the working directory when
/// under it, else as it is.
fn shown_path(path: &Path, cwd: &Path) -> String {
    let rel: PathBuf = match path.strip_prefix(cwd) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_path_buf(),
        _ => path.to_path_buf(),
    };
    let text = rel.display().to_string();
    text.strip_prefix("./").map(str::to_string).unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Why a test's grep failed: its arguments, or the search.
    #[derive(Debug, thiserror::Error)]
    enum Failed {
        #[error("{0}")]
        Args(#[from] serde_json::Error),
        #[error("{0}")]
        Search(#[from] SearchError),
    }

    fn grep(cwd: &Path, args: Value) -> Result<String, Failed> {
        let args: GrepArgs = serde_json::from_value(args)?;
        let root = cwd.join(args.path.as_deref().unwrap_or("."));
        Ok(search(&args, &root, cwd, &|| false)?)
    }

    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        std::fs::create_dir_all(d.join("src")).unwrap();
        std::fs::create_dir_all(d.join(".hidden")).unwrap();
        std::fs::create_dir_all(d.join("target")).unwrap();
        std::fs::write(d.join(".gitignore"), "target/\n").unwrap();
        std::fs::write(d.join("src/a.rs"), "fn main() {\n    let needle = 1;\n}\n").unwrap();
        std::fs::write(d.join("src/b.txt"), "one\nNEEDLE two\nthree\nfour\n").unwrap();
        std::fs::write(d.join(".hidden/c.rs"), "needle hidden\n").unwrap();
        std::fs::write(d.join("target/d.rs"), "needle ignored\n").unwrap();
        std::fs::write(d.join("bin.dat"), b"needle\0\x01\x02binary").unwrap();
        t
    }

    #[test]
    fn matches_as_path_line_text_skipping_ignored_hidden_and_binary() {
        let t = tree();
        let out = grep(t.path(), json!({"pattern": "needle"})).unwrap();
        assert_eq!(
            out,
            "src/a.rs:2:     let needle = 1;\n[1 matching line in 1 file]\n"
        );
    }

    #[test]
    fn case_glob_and_path() {
        let t = tree();
        let out = grep(
            t.path(),
            json!({"pattern": "needle", "case_insensitive": true}),
        )
        .unwrap();
        assert!(
            out.contains("src/a.rs:2:") && out.contains("src/b.txt:2: NEEDLE two"),
            "{out}"
        );
        let out = grep(
            t.path(),
            json!({"pattern": "needle", "case_insensitive": true, "glob": "*.txt"}),
        )
        .unwrap();
        assert!(!out.contains("a.rs") && out.contains("b.txt"), "{out}");
        let out = grep(t.path(), json!({"pattern": "n", "path": "src/a.rs"})).unwrap();
        assert!(out.starts_with("src/a.rs:1: fn main() {"), "{out}");
        // A hidden directory named explicitly is searched.
        let out = grep(t.path(), json!({"pattern": "needle", "path": ".hidden"})).unwrap();
        assert!(out.contains(".hidden/c.rs:1: needle hidden"), "{out}");
    }

    #[test]
    fn context_lines_are_marked_with_dashes() {
        let t = tree();
        let out = grep(
            t.path(),
            json!({"pattern": "NEEDLE", "context_lines": 1, "path": "src"}),
        )
        .unwrap();
        assert!(
            out.starts_with("src/b.txt-1- one\nsrc/b.txt:2: NEEDLE two\nsrc/b.txt-3- three\n"),
            "{out}"
        );
    }

    #[test]
    fn results_and_lines_are_bounded() {
        let t = tempfile::tempdir().unwrap();
        let long = "x".repeat(5000);
        let text: String = (0..500).map(|i| format!("hit {i} {long}\n")).collect();
        std::fs::write(t.path().join("many.txt"), text).unwrap();
        let out = grep(t.path(), json!({"pattern": "hit"})).unwrap();
        assert_eq!(
            out.lines().filter(|l| l.starts_with("many.txt:")).count(),
            100
        );
        assert!(
            out.contains("[stopped after 100 matching lines"),
            "{}",
            &out[out.len() - 200..]
        );
        assert!(out.lines().next().unwrap().ends_with("[line cut]"));
        let out = grep(t.path(), json!({"pattern": "hit", "max_results": 3})).unwrap();
        assert_eq!(
            out.lines().filter(|l| l.starts_with("many.txt:")).count(),
            3
        );
    }

    #[test]
    fn errors_are_messages() {
        let t = tree();
        let e = grep(t.path(), json!({"pattern": "("}))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("invalid regular expression"), "{e}");
        let e = grep(t.path(), json!({"pattern": "x", "path": "nope"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no such file"), "{e}");
        let e = grep(t.path(), json!({"pattern": "x", "glob": "a{b"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid glob"), "{e}");
        assert_eq!(
            grep(t.path(), json!({"pattern": "zzz"})).unwrap(),
            "no matches"
        );
        let args: GrepArgs = serde_json::from_value(json!({"pattern": "x"})).unwrap();
        assert_eq!(
            search(&args, t.path(), t.path(), &|| true)
                .unwrap_err()
                .to_string(),
            "interrupted"
        );
    }

    #[test]
    fn a_path_outside_the_working_directory_is_shown_whole() {
        let t = tree();
        let outside = t.path().join("src/b.txt");
        let args: GrepArgs = serde_json::from_value(json!({"pattern": "NEEDLE"})).unwrap();
        let out = search(&args, &outside, &t.path().join("target"), &|| false).unwrap();
        assert!(
            out.starts_with(&format!("{}:2: NEEDLE two", outside.display())),
            "{out}"
        );
        let out = search(&args, &outside, &t.path().join("src"), &|| false).unwrap();
        assert!(out.starts_with("b.txt:2: NEEDLE two"), "{out}");
    }

    #[test]
    fn the_schema_is_plain() {
        let schema = args_schema();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["pattern"]));
        assert_eq!(schema["properties"]["max_results"]["type"], "integer");
        assert_eq!(schema["properties"]["case_insensitive"]["type"], "boolean");
        assert!(schema.get("$schema").is_none() && schema.get("title").is_none());
    }
}
