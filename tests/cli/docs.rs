//! The documentation a newcomer reads (SPEC 21) stays true: the README's
//! size and first lines, links and anchors between the guides, the map of
//! `docs/`, every flag of `--help` in the options table, the workflows'
//! use of the action's inputs and outputs, and one repository URL.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::support::TestEnv;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// README.md and every guide in docs/ (not the maintainers' notes).
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![root().join("README.md")];
    let mut guides: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    guides.sort();
    docs.extend(guides);
    docs
}

/// The lines outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// GitHub's anchor for a heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .iter()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| slug(h.trim_start_matches('#')))
        .collect()
}

/// `(target)` of every Markdown link `[text](target)` in the prose.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let Some(end) = tail.find(')') else { break };
            found.push(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    found
}

#[test]
fn the_readme_is_short_and_opens_with_the_demo_and_the_tests() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(lines <= 400, "README.md has {lines} lines");
    assert!(readme.starts_with(
        "# tinyagent\n\n```sh\ncargo run --quiet -- -m script/testdata/demo.yaml -C \"$(mktemp -d)\" \"Write greet.sh and make its test pass\"   # offline demo, no API key\ncargo test --locked   "
    ));
    // The demo command runs as written (from the repository's root).
    let env = TestEnv::new();
    env.cmd()
        .current_dir(root())
        .args(["-m", "script/testdata/demo.yaml", "-C"])
        .arg(env.work())
        .arg("Write greet.sh and make its test pass")
        .assert()
        .success();
}

#[test]
fn every_link_between_the_documents_leads_somewhere() {
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for link in links(&text) {
            if link.starts_with("http") {
                continue;
            }
            let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                doc.clone()
            } else {
                doc.parent().unwrap().join(file)
            };
            assert!(target.exists(), "{}: {link}: no such file", doc.display());
            if !anchor.is_empty() {
                let text = std::fs::read_to_string(&target).unwrap();
                assert!(
                    anchors(&text).contains(anchor),
                    "{}: {link}: no such heading",
                    doc.display()
                );
            }
        }
    }
}

#[test]
fn the_readme_maps_every_guide_and_the_guides_are_those_of_spec_21() {
    let readme = read("README.md");
    let guides: BTreeSet<String> = documents()[1..]
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let expected: BTreeSet<String> = [
        "configuration",
        "providers",
        "fallback-and-health",
        "ci-and-fleets",
        "events-and-logs",
        "sessions-and-approvals",
        "tools-and-safety",
        "troubleshooting",
        "performance",
    ]
    .iter()
    .map(|g| format!("{g}.md"))
    .collect();
    assert_eq!(guides, expected);
    for guide in &guides {
        assert!(readme.contains(&format!("](docs/{guide})")), "{guide}");
    }
}

#[test]
fn the_options_table_has_every_flag_of_help() {
    let env = TestEnv::new();
    let out = env.cmd().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let doc = read("docs/configuration.md");
    let flags: BTreeSet<&str> = help
        .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == '=')
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()))
        .collect();
    assert!(flags.len() > 20, "{flags:?}");
    for flag in flags {
        let named = doc.match_indices(flag).any(|(at, _)| {
            !doc[at + flag.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-')
        });
        assert!(named, "{flag} is not in docs/configuration.md");
    }
}

/// Every step of the documentation's workflows that uses the action.
fn action_steps() -> Vec<(String, serde_yaml::Value)> {
    let mut steps = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let mut block = None::<String>;
        for line in text.lines() {
            match (&mut block, line) {
                (None, "```yaml") => block = Some(String::new()),
                (Some(b), "```") if !b.contains("tinyagent/tinyagent@") => block = None,
                (Some(b), "```") => {
                    let yaml: serde_yaml::Value = serde_yaml::from_str(b)
                        .unwrap_or_else(|e| panic!("{}: {e}\n{b}", doc.display()));
                    collect_steps(&yaml, &doc, &mut steps);
                    block = None;
                }
                (Some(b), line) => {
                    b.push_str(line);
                    b.push('\n');
                }
                _ => {}
            }
        }
    }
    steps
}

fn collect_steps(
    yaml: &serde_yaml::Value,
    doc: &Path,
    steps: &mut Vec<(String, serde_yaml::Value)>,
) {
    let uses = yaml.get("uses").and_then(|u| u.as_str()).unwrap_or("");
    if uses.starts_with("tinyagent/tinyagent@") {
        steps.push((doc.display().to_string(), yaml.clone()));
    }
    match yaml {
        serde_yaml::Value::Mapping(m) => m.values().for_each(|v| collect_steps(v, doc, steps)),
        serde_yaml::Value::Sequence(s) => s.iter().for_each(|v| collect_steps(v, doc, steps)),
        _ => {}
    }
}

#[test]
fn the_workflows_use_only_the_actions_inputs_and_outputs() {
    let action: serde_yaml::Value = serde_yaml::from_str(&read("action.yml")).unwrap();
    let names = |key: &str| -> BTreeSet<String> {
        action[key]
            .as_mapping()
            .unwrap()
            .keys()
            .map(|k| k.as_str().unwrap().to_string())
            .collect()
    };
    let (inputs, outputs) = (names("inputs"), names("outputs"));
    assert_eq!(
        inputs,
        [
            "args",
            "config",
            "fallback-models",
            "model",
            "task",
            "version"
        ]
        .map(String::from)
        .into()
    );
    assert_eq!(
        outputs,
        ["answer", "checkpoint", "cost-usd", "exit-code", "status"]
            .map(String::from)
            .into()
    );
    let steps = action_steps();
    assert!(steps.len() >= 4, "{steps:?}");
    for (doc, step) in &steps {
        let with = step["with"].as_mapping().expect("with:");
        assert!(with.contains_key("task"), "{doc}: no task");
        for key in with.keys() {
            assert!(
                inputs.contains(key.as_str().unwrap()),
                "{doc}: unknown input {key:?}"
            );
        }
    }
    // `steps.<id>.outputs.<name>` names an output the action has.
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (at, _) in text.match_indices(".outputs.") {
            let name: String = text[at + 9..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            assert!(outputs.contains(&name), "{}: output {name}", doc.display());
        }
    }
}

#[test]
fn install_sh_the_readme_and_cargo_toml_name_one_repository() {
    let cargo = read("Cargo.toml");
    let repository = cargo
        .lines()
        .find_map(|l| l.strip_prefix("repository = \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("Cargo.toml: repository");
    let slug = repository.strip_prefix("https://github.com/").unwrap();
    assert!(read("install.sh").contains(&format!("REPOSITORY=\"{repository}\"")));
    let readme = read("README.md");
    assert!(readme.contains(&format!(
        "curl -fsSL https://raw.githubusercontent.com/{slug}/main/install.sh -o tinyagent-install.sh && sh tinyagent-install.sh"
    )));
    assert!(readme.contains(&format!("uses: {slug}@v1")));
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (at, _) in text.match_indices("raw.githubusercontent.com/") {
            assert!(
                text[at..].starts_with(&format!("raw.githubusercontent.com/{slug}/")),
                "{}",
                doc.display()
            );
        }
    }
}

/// docs/events-and-logs.md gives the log database's schema as a run writes
/// it: the version in `PRAGMA user_version`, and every column of every
/// table in the table's row.
#[test]
fn the_log_database_guide_gives_the_schema_a_run_writes() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", "- text: done\n");
    let db = env.file("log.db");
    env.cmd()
        .args(["-m", &model, "--log-db", db.to_str().unwrap(), "task"])
        .assert()
        .success();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let version: u32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let guide = read("docs/events-and-logs.md");
    assert!(
        guide.contains(&format!("`PRAGMA user_version` (currently {version})")),
        "the guide does not give schema version {version}"
    );
    for table in ["runs", "events", "tool_calls", "model_requests"] {
        let row = guide
            .lines()
            .find(|l| l.starts_with(&format!("| `{table}` |")))
            .unwrap_or_else(|| panic!("no row for {table}"));
        let mut columns = conn
            .prepare("SELECT name FROM pragma_table_info(?1)")
            .unwrap();
        let names: Vec<String> = columns
            .query_map([table], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(!names.is_empty(), "{table}");
        for name in names {
            assert!(
                row.contains(&format!("`{name}`")),
                "{table}.{name} is not in the guide"
            );
        }
    }
}

#[test]
fn the_options_table_names_each_flag_once() {
    let doc = read("docs/configuration.md");
    let mut seen = BTreeSet::new();
    for row in doc.lines().filter(|l| l.starts_with("| `-")) {
        let first = row.split('|').nth(1).unwrap().trim().to_string();
        assert!(seen.insert(first.clone()), "{first} is listed twice");
    }
    assert!(seen.len() > 20, "{seen:?}");
}

#[test]
fn every_api_comment_names_every_api_and_every_provider_is_known_to_the_docs() {
    const APIS: [&str; 9] = [
        "openai",
        "responses",
        "anthropic",
        "ollama",
        "bedrock",
        "vertex",
        "gemini",
        "azure",
        "foundry",
    ];
    for path in ["README.md", "docs/configuration.md", "docs/providers.md"] {
        let text = read(path);
        let comments: Vec<&str> = text
            .lines()
            .filter(|l| l.trim_start().starts_with("api:") && l.contains("# openai |"))
            .collect();
        assert!(!comments.is_empty(), "{path} has no `api:` comment");
        for line in comments {
            let listed: Vec<&str> = line
                .split('#')
                .nth(1)
                .unwrap()
                .split('|')
                .map(str::trim)
                .collect();
            assert_eq!(listed, APIS, "{path}: {line}");
        }
    }
    // The "known providers" list of the errors section names every
    // built-in provider `--help` lists, and every endpoint override
    // `--help` names is in the providers guide.
    let env = TestEnv::new();
    let out = env.cmd().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let builtins: Vec<&str> = help
        .split("Built-in providers")
        .nth(1)
        .unwrap()
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert!(builtins.len() >= 10, "{builtins:?}");
    let config = read("docs/configuration.md").replace('\n', " ");
    let known = config
        .split("known providers: ")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .expect("docs/configuration.md lists the known providers");
    let known: Vec<&str> = known.split(',').map(str::trim).collect();
    for provider in builtins {
        assert!(known.contains(&provider), "{provider} is not in {known:?}");
    }
    let overrides = help
        .split("Endpoint overrides")
        .nth(1)
        .unwrap()
        .split(".\n")
        .next()
        .unwrap();
    let providers = read("docs/providers.md");
    let vars: Vec<&str> = overrides
        .split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
        .filter(|w| w.len() > 4 && w.contains('_'))
        .collect();
    assert!(vars.len() >= 8, "{vars:?}");
    for var in vars {
        assert!(providers.contains(var), "{var} is not in docs/providers.md");
    }
}
