//! `--worktree [NAME]` (SPEC section 12): a new branch `tinyagent/<NAME>`
//! checked out in a new worktree `<repo-parent>/<repo>-worktrees/<NAME>`,
//! beside the repository, where the run then works. It is kept afterwards.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The branch prefix of run worktrees.
pub(crate) const BRANCH_PREFIX: &str = "tinyagent/";

/// A worktree created for a run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Worktree {
    /// The worktree's top directory.
    pub path: PathBuf,
    pub branch: String,
    /// Where the run works: the same place within the worktree as the
    /// starting directory was within its checkout.
    pub cwd: PathBuf,
}

/// Whether `name` can name a worktree directory and branch.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && !name.starts_with(['.', '-'])
        && !name.ends_with('.')
        && !name.ends_with(".lock")
        && !name.contains("..")
}

/// Splits `--worktree [VALUE]` and TASK: a VALUE that cannot be a name,
/// given without a TASK, is the task (`--worktree "fix the tests"`).
/// Returns (task argument, name request) where the name request is
/// `None` without `--worktree`, `Some(None)` for an automatic name.
pub(crate) fn split_task_and_name<'a>(
    task: Option<&'a str>,
    worktree: Option<&'a Option<String>>,
) -> (Option<&'a str>, Option<Option<&'a str>>) {
    match worktree {
        None => (task, None),
        Some(None) => (task, Some(None)),
        Some(Some(value)) if task.is_none() && !valid_name(value) => {
            (Some(value.as_str()), Some(None))
        }
        Some(Some(value)) => (task, Some(Some(value.as_str()))),
    }
}

/// Why a worktree could not be made: each a one-line reason (exit 2).
#[derive(Debug, thiserror::Error)]
pub(crate) enum WorktreeError {
    #[error("'{0}' is not a usable worktree name (letters, digits, '.', '_' and '-')")]
    BadName(String),
    #[error("{} is not inside a git repository", .0.display())]
    NotARepository(PathBuf),
    #[error("the worktree {} already exists; choose another name", .0.display())]
    PathTaken(PathBuf),
    #[error("the branch {0} already exists; choose another name")]
    BranchTaken(String),
    #[error("the repository has no commit yet to start a worktree from")]
    NoCommit,
    #[error(transparent)]
    Git(#[from] GitError),
}

/// A git command that failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GitError {
    #[error("cannot run git: {0}")]
    Spawn(std::io::Error),
    /// Its first error line, without `fatal: `.
    #[error("{0}")]
    Failed(String),
}

/// Creates the branch and worktree `name` for the repository around `cwd`,
/// from its current HEAD. Every failure is a one-line reason (exit 2).
pub(crate) fn create(cwd: &Path, name: &str) -> Result<Worktree, WorktreeError> {
    if !valid_name(name) {
        return Err(WorktreeError::BadName(name.to_string()));
    }
    let toplevel = git(cwd, &["rev-parse", "--show-toplevel"]).map_err(|e| match e {
        GitError::Failed(line) if line.contains("not a git repository") => {
            WorktreeError::NotARepository(cwd.to_path_buf())
        }
        other => WorktreeError::Git(other),
    })?;
    let toplevel = PathBuf::from(toplevel);
    let common = PathBuf::from(git(
        cwd,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    )?);
    // The main checkout: the parent of a `.git` directory (also when we are
    // in a linked worktree); otherwise the current checkout.
    let repo = match common.file_name() {
        Some(n) if n == ".git" => common
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or(toplevel.clone()),
        _ => toplevel.clone(),
    };
    let repo_name = repo
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "repo".into());
    let parent = repo.parent().unwrap_or(&repo);
    let path = parent.join(format!("{repo_name}-worktrees")).join(name);
    let branch = format!("{BRANCH_PREFIX}{name}");
    if path.exists() {
        return Err(WorktreeError::PathTaken(path));
    }
    if git(
        cwd,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}"),
        ],
    )
    .is_ok()
    {
        return Err(WorktreeError::BranchTaken(branch));
    }
    if git(cwd, &["rev-parse", "--verify", "--quiet", "HEAD"]).is_err() {
        return Err(WorktreeError::NoCommit);
    }
    let path_text = path.to_string_lossy().into_owned();
    git(
        cwd,
        &[
            "worktree", "add", "--quiet", "-b", &branch, &path_text, "HEAD",
        ],
    )?;
    let path = path.canonicalize().unwrap_or(path);
    let inside = cwd
        .strip_prefix(&toplevel)
        .ok()
        .filter(|rel| !rel.as_os_str().is_empty())
        .map(|rel| path.join(rel))
        .filter(|p| p.is_dir())
        .unwrap_or_else(|| path.clone());
    Ok(Worktree {
        path,
        branch,
        cwd: inside,
    })
}

/// Runs git in `dir`; its trimmed stdout, or its first error line.
fn git(dir: &Path, args: &[&str]) -> Result<String, GitError> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .map_err(GitError::Spawn)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("git failed");
        Err(GitError::Failed(
            line.trim().trim_start_matches("fatal: ").to_string(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_words() {
        for ok in ["fix-tests", "run_2", "v1.2", "3f2a9c1b-aaaa-bbbb"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in [
            "",
            "fix the tests",
            "a/b",
            "-x",
            ".x",
            "x.",
            "x.lock",
            "a..b",
            "é",
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_value_that_cannot_be_a_name_is_the_task_when_none_is_given() {
        let wt = Some(Some("fix the tests".to_string()));
        assert_eq!(
            split_task_and_name(None, wt.as_ref()),
            (Some("fix the tests"), Some(None))
        );
        let wt = Some(Some("fix".to_string()));
        assert_eq!(
            split_task_and_name(None, wt.as_ref()),
            (None, Some(Some("fix")))
        );
        assert_eq!(
            split_task_and_name(Some("t"), wt.as_ref()),
            (Some("t"), Some(Some("fix")))
        );
        assert_eq!(
            split_task_and_name(Some("t"), Some(&None)),
            (Some("t"), Some(None))
        );
        assert_eq!(split_task_and_name(Some("t"), None), (Some("t"), None));
    }
}
