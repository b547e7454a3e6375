//! File tools: `read_file`, `write_file`, `edit_file` and `list_files`.

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{shorten, str_arg, Tool, ToolCtx, ToolOutput, MAX_OUTPUT_CHARS};
use crate::conversation::ToolSpec;
use crate::text_edit::{self, EditError};

const DEFAULT_READ_LIMIT: usize = 2000;
const MAX_LISTED: usize = 1000;

/// `read_file`: lines of a text file, numbered, from `offset` (1-based).
pub(crate) struct ReadFile;
/// `write_file`: create or replace a file.
pub(crate) struct WriteFile;
/// `edit_file`: replace an exact, unique string (or all occurrences).
pub(crate) struct EditFile;
/// `list_files`: files under a directory matching a glob.
pub(crate) struct ListFiles;

macro_rules! try_arg {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return ToolOutput::err(e.to_string()),
        }
    };
}

#[async_trait]
impl Tool for ReadFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "read_file".into(),
            description: "Read a text file. Lines come numbered; use offset (first line, from 1) and limit (line count) for large files.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "offset": {"type": "integer", "description": "First line to read, from 1."},
                    "limit": {"type": "integer", "description": "How many lines to read (default 2000)."}
                },
                "required": ["path"]
            }),
        }
    }

    async fn run(&self, args: &Value, ctx: &ToolCtx) -> ToolOutput {
        let path = try_arg!(str_arg(args, "path"));
        let offset = args
            .get("offset")
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .max(1) as usize;
        let limit = args
            .get("limit")
            .and_then(Value::as_u64)
            .map(|l| l as usize)
            .unwrap_or(DEFAULT_READ_LIMIT);
        let text = match tokio::fs::read(ctx.resolve(path)).await {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => return ToolOutput::err(format!("cannot read {path}: {e}")),
        };
        let total = text.lines().count();
        let mut out = String::new();
        for (i, line) in text.lines().enumerate().skip(offset - 1).take(limit) {
            out.push_str(&format!("{:>6}\t{line}\n", i + 1));
        }
        let last = (offset - 1 + limit).min(total);
        if last < total {
            out.push_str(&format!(
                "[showing lines {offset}-{last} of {total}; use offset to read more]\n"
            ));
        }
        if total == 0 {
            out.push_str("[empty file]\n");
        }
        ToolOutput::ok(shorten(&out, MAX_OUTPUT_CHARS))
    }
}

#[async_trait]
impl Tool for WriteFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "write_file".into(),
            description:
                "Create or overwrite a file with the given content. Parent directories are created."
                    .into(),
            parameters: json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"]
            }),
        }
    }

    async fn run(&self, args: &Value, ctx: &ToolCtx) -> ToolOutput {
        let path = try_arg!(str_arg(args, "path"));
        let content = try_arg!(str_arg(args, "content"));
        let full = ctx.resolve(path);
        if let Some(parent) = full.parent() {
            if let Err(e) = tokio::fs::create_dir_all(parent).await {
                return ToolOutput::err(format!("cannot create {}: {e}", parent.display()));
            }
        }
        match tokio::fs::write(&full, content).await {
            Ok(()) => ToolOutput::ok(format!("wrote {} bytes to {path}", content.len())),
            Err(e) => ToolOutput::err(format!("cannot write {path}: {e}")),
        }
    }
}

#[async_trait]
impl Tool for EditFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "edit_file".into(),
            description: "Replace old_string with new_string in a file. old_string must match exactly once unless replace_all is true.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "old_string": {"type": "string"},
                    "new_string": {"type": "string"},
                    "replace_all": {"type": "boolean"}
                },
                "required": ["path", "old_string", "new_string"]
            }),
        }
    }

    async fn run(&self, args: &Value, ctx: &ToolCtx) -> ToolOutput {
        let path = try_arg!(str_arg(args, "path"));
        let old = try_arg!(str_arg(args, "old_string"));
        let new = try_arg!(str_arg(args, "new_string"));
        let all = args
            .get("replace_all")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if old.is_empty() {
            return ToolOutput::err(EditError::EmptyOld.to_string());
        }
        let full = ctx.resolve(path);
        let text = match tokio::fs::read_to_string(&full).await {
            Ok(t) => t,
            Err(e) => return ToolOutput::err(format!("cannot read {path}: {e}")),
        };
        let (updated, count) = match text_edit::replace(&text, old, new, all, path) {
            Ok(done) => done,
            Err(e) => return ToolOutput::err(e.to_string()),
        };
        match tokio::fs::write(&full, updated).await {
            Ok(()) => ToolOutput::ok(format!(
                "replaced {count} occurrence{} in {path}",
                if count == 1 { "" } else { "s" }
            )),
            Err(e) => ToolOutput::err(format!("cannot write {path}: {e}")),
        }
    }
}

#[async_trait]
impl Tool for ListFiles {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "list_files".into(),
            description: "List files under a directory (default: the working directory), optionally filtered by a glob such as **/*.rs. Skips .git.".into(),
            parameters: json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "pattern": {"type": "string"}}
            }),
        }
    }

    async fn run(&self, args: &Value, ctx: &ToolCtx) -> ToolOutput {
        let path = args.get("path").and_then(Value::as_str).unwrap_or(".");
        let pattern = args.get("pattern").and_then(Value::as_str);
        let matcher = match pattern.map(globset::Glob::new).transpose() {
            Ok(glob) => glob.map(|g| g.compile_matcher()),
            Err(e) => return ToolOutput::err(format!("invalid pattern: {e}")),
        };
        let root = ctx.resolve(path);
        if !root.is_dir() {
            return ToolOutput::err(format!("not a directory: {path}"));
        }
        let listing = tokio::task::spawn_blocking(move || {
            let mut files = Vec::new();
            let walker = walkdir::WalkDir::new(&root)
                .sort_by_file_name()
                .into_iter()
                .filter_entry(|e| e.file_name() != ".git");
            for entry in walker.flatten() {
                if !entry.file_type().is_file() {
                    continue;
                }
                let Ok(rel) = entry.path().strip_prefix(&root) else {
                    continue;
                };
                if matcher.as_ref().is_none_or(|m| m.is_match(rel)) {
                    files.push(rel.to_string_lossy().into_owned());
                }
            }
            files
        })
        .await
        .unwrap_or_default();
        let total = listing.len();
        let mut out: String = listing
            .iter()
            .take(MAX_LISTED)
            .map(|f| format!("{f}\n"))
            .collect();
        if total > MAX_LISTED {
            out.push_str(&format!("[{} more files not shown]\n", total - MAX_LISTED));
        }
        if total == 0 {
            out.push_str("[no files]\n");
        }
        ToolOutput::ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stop::Stop;

    fn ctx(dir: &std::path::Path) -> ToolCtx {
        ToolCtx {
            cwd: dir.to_path_buf(),
            stop: Stop::never(),
        }
    }

    fn run(tool: &dyn Tool, args: Value, dir: &std::path::Path) -> ToolOutput {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(tool.run(&args, &ctx(dir)))
    }

    #[test]
    fn write_then_read_with_offset_and_limit() {
        let dir = tempfile::tempdir().unwrap();
        let w = run(
            &WriteFile,
            json!({"path": "a/b.txt", "content": "one\ntwo\nthree\n"}),
            dir.path(),
        );
        assert!(w.ok, "{}", w.output);
        let r = run(
            &ReadFile,
            json!({"path": "a/b.txt", "offset": 2, "limit": 1}),
            dir.path(),
        );
        assert!(r.ok);
        assert!(r.output.starts_with("     2\ttwo\n"), "{}", r.output);
        assert!(r.output.contains("showing lines 2-2 of 3"));
    }

    #[test]
    fn edit_requires_a_unique_match() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "x x y").unwrap();
        let twice = run(
            &EditFile,
            json!({"path": "f", "old_string": "x", "new_string": "z"}),
            dir.path(),
        );
        assert!(!twice.ok);
        assert!(twice.output.contains("occurs 2 times"));
        let missing = run(
            &EditFile,
            json!({"path": "f", "old_string": "q", "new_string": "z"}),
            dir.path(),
        );
        assert!(!missing.ok);
        let one = run(
            &EditFile,
            json!({"path": "f", "old_string": "y", "new_string": "w"}),
            dir.path(),
        );
        assert!(one.ok);
        let all = run(
            &EditFile,
            json!({"path": "f", "old_string": "x", "new_string": "z", "replace_all": true}),
            dir.path(),
        );
        assert!(all.ok);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("f")).unwrap(),
            "z z w"
        );
    }

    #[test]
    fn list_files_with_glob_skips_git() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src/x")).unwrap();
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join("src/x/a.rs"), "").unwrap();
        std::fs::write(dir.path().join("b.txt"), "").unwrap();
        std::fs::write(dir.path().join(".git/HEAD"), "").unwrap();
        let all = run(&ListFiles, json!({}), dir.path());
        assert_eq!(all.output, "b.txt\nsrc/x/a.rs\n");
        let rs = run(&ListFiles, json!({"pattern": "**/*.rs"}), dir.path());
        assert_eq!(rs.output, "src/x/a.rs\n");
    }
}
