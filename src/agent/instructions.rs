//! Project instructions (SPEC section 14): the `AGENTS.md` files from the
//! repository root down to the working directory, or the one file given by
//! `--instructions` / config `instructions: FILE`, read within a 32 KiB
//! budget for the system prompt. They are text for the model, never
//! configuration: nothing here can change a setting.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::setup::SetupError;

/// The file name looked for in each directory.
pub(crate) const FILE_NAME: &str = "AGENTS.md";

/// Most bytes of instructions put in the system prompt, all files together.
pub(crate) const MAX_BYTES: usize = 32 * 1024;

/// The instructions of one run: the files used, in order, with their text.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Instructions {
    /// (path as shown to the model and in `run.started`, text)
    pub files: Vec<(String, String)>,
    /// What the user should hear: cut, skipped or unreadable files.
    pub warnings: Vec<String>,
}

impl Instructions {
    /// The paths used, for `run.started.instructions`.
    pub(crate) fn paths(&self) -> Vec<String> {
        self.files.iter().map(|(p, _)| p.clone()).collect()
    }

    /// The system prompt section, or `None` when there are no instructions.
    pub(crate) fn prompt_section(&self) -> Option<String> {
        if self.files.is_empty() {
            return None;
        }
        let mut out = String::from(
            "# Project instructions\n\n\
The project gives these instructions (AGENTS.md files, from the repository root down to the \
working directory; a deeper file refines the ones above it). Follow them unless the task says otherwise.",
        );
        for (path, text) in &self.files {
            out.push_str(&format!("\n\n## {path}\n\n{}", text.trim_end()));
        }
        Some(out)
    }
}

/// Where the instructions come from, resolved from the flag and the config.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Source {
    Off,
    /// The `AGENTS.md` files found from the repository root to `cwd`.
    Found,
    /// One file, instead of the files found, with where it was named
    /// (`--instructions` or `config instructions`) for errors.
    File(PathBuf, &'static str),
}

/// Loads the instructions of a run in `cwd`. Only an explicitly named file
/// that cannot be read is an error (exit 2); every other trouble is a
/// warning.
pub(crate) fn load(source: &Source, cwd: &Path) -> Result<Instructions, SetupError> {
    let mut out = Instructions::default();
    let mut budget = Budget::new(MAX_BYTES);
    match source {
        Source::Off => {}
        Source::File(path, named_by) => {
            let file = std::fs::File::open(path).map_err(|e| {
                SetupError(format!("{named_by} {}: cannot read: {e}", path.display()))
            })?;
            if !path.is_file() {
                return Err(SetupError(format!(
                    "{named_by} {}: not a file",
                    path.display()
                )));
            }
            read_into(file, &path.display().to_string(), &mut budget, &mut out);
        }
        Source::Found => {
            let cwd = cwd.canonicalize().unwrap_or_else(|_| cwd.to_path_buf());
            let root = repo_root(&cwd).unwrap_or_else(|| cwd.clone());
            for dir in dirs_from(&root, &cwd) {
                let path = dir.join(FILE_NAME);
                let shown = path.display().to_string();
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                if meta.file_type().is_symlink() {
                    match path.canonicalize() {
                        Ok(target) if target.starts_with(&root) && target.is_file() => {}
                        Ok(target) if !target.starts_with(&root) => {
                            out.warnings.push(format!(
                                "skipped project instructions {shown}: a symlink to {}, outside the repository {}",
                                target.display(),
                                root.display()
                            ));
                            continue;
                        }
                        _ => {
                            out.warnings.push(format!(
                                "skipped project instructions {shown}: a symlink to nothing readable"
                            ));
                            continue;
                        }
                    }
                } else if !meta.is_file() {
                    continue;
                }
                match std::fs::File::open(&path) {
                    Ok(file) => read_into(file, &shown, &mut budget, &mut out),
                    Err(e) => out
                        .warnings
                        .push(format!("skipped project instructions {shown}: {e}")),
                }
            }
        }
    }
    if let Some(w) = budget.warning() {
        out.warnings.push(w);
    }
    Ok(out)
}

/// What is left of the byte budget, and what was cut from which file.
struct Budget {
    left: usize,
    cut: Vec<String>,
}

impl Budget {
    fn new(max: usize) -> Self {
        Budget {
            left: max,
            cut: Vec::new(),
        }
    }

    fn warning(&self) -> Option<String> {
        (!self.cut.is_empty()).then(|| {
            format!(
                "project instructions are limited to {} KiB: {}",
                MAX_BYTES / 1024,
                self.cut.join("; ")
            )
        })
    }
}

/// Reads at most what the budget allows of one file (never the whole of a
/// huge one), as UTF-8 (invalid bytes replaced, with a warning).
fn read_into(file: std::fs::File, shown: &str, budget: &mut Budget, out: &mut Instructions) {
    if budget.left == 0 {
        budget.cut.push(format!("{shown} skipped"));
        return;
    }
    let mut bytes = Vec::new();
    // One byte more than the budget tells whether the file is longer.
    if let Err(e) = file.take(budget.left as u64 + 1).read_to_end(&mut bytes) {
        out.warnings
            .push(format!("skipped project instructions {shown}: {e}"));
        return;
    }
    let longer = bytes.len() > budget.left;
    if longer {
        bytes.truncate(budget.left);
        // A cut in the middle of a character drops the partial character.
        if let Err(e) = std::str::from_utf8(&bytes) {
            if e.error_len().is_none() {
                bytes.truncate(e.valid_up_to());
            }
        }
        budget
            .cut
            .push(format!("{shown} cut after {} bytes", bytes.len()));
    }
    // Once a file is cut the budget is spent: nothing after it gets in.
    budget.left = if longer { 0 } else { budget.left - bytes.len() };
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            out.warnings.push(format!(
                "project instructions {shown} are not valid UTF-8: invalid bytes were replaced"
            ));
            String::from_utf8_lossy(e.as_bytes()).into_owned()
        }
    };
    if !text.trim().is_empty() {
        out.files.push((shown.to_string(), text));
    }
}

/// The git top level above `dir` (a directory holding `.git`, a directory
/// or a worktree's file), if any.
fn repo_root(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| d.join(".git").exists())
        .map(Path::to_path_buf)
}

/// `root`, then each directory below it down to `cwd`, in that order.
fn dirs_from(root: &Path, cwd: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = cwd
        .ancestors()
        .take_while(|d| d.starts_with(root))
        .map(Path::to_path_buf)
        .collect();
    dirs.reverse();
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(cwd: &Path) -> Instructions {
        load(&Source::Found, cwd).unwrap()
    }

    #[test]
    fn files_from_the_root_down_in_order() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("AGENTS.md"), "root rules").unwrap();
        std::fs::write(root.join("a/b/AGENTS.md"), "deep rules").unwrap();
        let i = found(&root.join("a/b"));
        let texts: Vec<&str> = i.files.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(texts, ["root rules", "deep rules"]);
        assert!(i.files[0].0.ends_with("AGENTS.md"));
        assert!(i.warnings.is_empty());
        let section = i.prompt_section().unwrap();
        let first = section.find("root rules").unwrap();
        assert!(section[..first].contains(&format!("## {}", root.join("AGENTS.md").display())));
        assert!(first < section.find("deep rules").unwrap());
    }

    #[test]
    fn outside_a_repository_only_the_working_directory() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("AGENTS.md"), "above").unwrap();
        std::fs::write(root.join("sub/AGENTS.md"), "here").unwrap();
        let i = found(&root.join("sub"));
        assert_eq!(i.files.len(), 1);
        assert_eq!(i.files[0].1, "here");
    }

    #[test]
    fn the_budget_cuts_and_skips_with_one_warning() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join("a")).unwrap();
        // A multi-byte character straddles the cut.
        let big = format!("{}é{}", "x".repeat(MAX_BYTES - 1), "y".repeat(1000));
        std::fs::write(root.join("AGENTS.md"), &big).unwrap();
        std::fs::write(root.join("a/AGENTS.md"), "never read").unwrap();
        let i = found(&root.join("a"));
        assert_eq!(i.files.len(), 1);
        assert_eq!(i.files[0].1.len(), MAX_BYTES - 1);
        assert_eq!(i.warnings.len(), 1, "{:#?}", i.warnings);
        assert!(
            i.warnings[0].contains("cut after 32767 bytes"),
            "{:?}",
            i.warnings
        );
        assert!(
            i.warnings[0].contains("a/AGENTS.md skipped"),
            "{:?}",
            i.warnings
        );
    }

    #[test]
    fn invalid_utf8_is_replaced_with_a_warning() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        std::fs::write(root.join("AGENTS.md"), b"ok \xff\xfe end").unwrap();
        let i = found(&root);
        assert_eq!(i.files[0].1, "ok \u{fffd}\u{fffd} end");
        assert!(i.warnings[0].contains("not valid UTF-8"));
    }

    #[test]
    fn a_symlink_out_of_the_repository_is_skipped() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().canonicalize().unwrap();
        let repo = base.join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::write(base.join("secret.md"), "outside").unwrap();
        std::os::unix::fs::symlink(base.join("secret.md"), repo.join("AGENTS.md")).unwrap();
        let i = found(&repo);
        assert!(i.files.is_empty());
        assert!(
            i.warnings[0].contains("outside the repository"),
            "{:?}",
            i.warnings
        );
        // A symlink inside the repository is followed.
        std::fs::write(repo.join("rules.md"), "inside").unwrap();
        std::fs::remove_file(repo.join("AGENTS.md")).unwrap();
        std::os::unix::fs::symlink(repo.join("rules.md"), repo.join("AGENTS.md")).unwrap();
        assert_eq!(found(&repo).files[0].1, "inside");
    }

    #[test]
    fn sources() {
        let cwd = Path::new("/w");
        let e = load(&Source::File("/no/such.md".into(), "--instructions"), cwd).unwrap_err();
        assert!(
            e.0.starts_with("--instructions /no/such.md: cannot read"),
            "{e}"
        );
        assert_eq!(load(&Source::Off, cwd).unwrap(), Instructions::default());
    }
}
