#!/bin/sh
# Installs tinyagent from its release archives:
#
#   curl -fsSL https://raw.githubusercontent.com/tinyagent/tinyagent/main/install.sh -o tinyagent-install.sh && sh tinyagent-install.sh
#
# (Downloaded first, then run: `curl ... | sh` would run an empty script,
# and succeed, when the download fails.)
#
# Picks the archive for this machine (uname -s, uname -m), checks its sha256
# against the .sha256 file beside it, and installs the binary. Nothing is
# installed unless every step succeeded.
#
#   TINYAGENT_INSTALL_DIR   where the binary goes (default: ~/.local/bin)
#   TINYAGENT_VERSION       a version such as 0.2.0 (default: the latest release)
#   TINYAGENT_DOWNLOAD_URL  the releases' base URL (a mirror, or a test server):
#                           archives are fetched from <base>/v<version>/<archive>,
#                           and the latest version is read from <base>/latest
#
# POSIX sh; needs curl or wget, tar, and sha256sum or shasum.
set -eu

REPOSITORY="https://github.com/tinyagent/tinyagent"

fail() {
  echo "tinyagent install: error: $*" >&2
  exit 1
}

# The release target for this machine, or an error naming what it is.
detect_target() {
  os=$(uname -s 2>/dev/null || echo unknown)
  arch=$(uname -m 2>/dev/null || echo unknown)
  case "$os" in
    Linux) suffix=unknown-linux-musl ;;
    Darwin) suffix=apple-darwin ;;
    *) fail "no release for this platform: $os $arch (there are builds for Linux and macOS on x86_64 and aarch64; elsewhere build it: cargo install --locked --git $REPOSITORY tinyagent)" ;;
  esac
  case "$arch" in
    x86_64 | amd64) cpu=x86_64 ;;
    aarch64 | arm64) cpu=aarch64 ;;
    *) fail "no release for this platform: $os $arch (there are builds for Linux and macOS on x86_64 and aarch64; elsewhere build it: cargo install --locked --git $REPOSITORY tinyagent)" ;;
  esac
  # An x86_64 shell on Apple silicon (Rosetta) still gets the native build.
  if [ "$os" = Darwin ] && [ "$cpu" = x86_64 ] &&
    [ "$(sysctl -n sysctl.proc_translated 2>/dev/null || echo 0)" = 1 ]; then
    cpu=aarch64
  fi
  echo "$cpu-$suffix"
}

# download URL FILE: fails with one line saying why.
download() {
  if command -v curl >/dev/null 2>&1; then
    status=$(curl -sSL --retry 2 -o "$2" -w '%{http_code}' "$1" 2>/dev/null) ||
      fail "download failed: $1 (could not connect)"
    [ "$status" = 200 ] || fail "download failed: $1 (HTTP $status)"
  elif command -v wget >/dev/null 2>&1; then
    wget -q -O "$2" "$1" 2>/dev/null || fail "download failed: $1"
  else
    fail "neither curl nor wget is installed"
  fi
}

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d ' ' -f 1
  elif command -v shasum >/dev/null 2>&1; then
    shasum -a 256 "$1" | cut -d ' ' -f 1
  else
    fail "neither sha256sum nor shasum is installed: cannot check the download"
  fi
}

main() {
  target=$(detect_target)
  base=${TINYAGENT_DOWNLOAD_URL:-}
  base=${base%/}
  tmp=$(mktemp -d 2>/dev/null || mktemp -d -t tinyagent)
  trap 'rm -rf "$tmp"' EXIT
  trap 'exit 130' INT TERM

  version=${TINYAGENT_VERSION:-}
  if [ -z "$version" ]; then
    # Every release carries an asset `latest` holding its own version.
    latest=${base:+$base/latest}
    download "${latest:-$REPOSITORY/releases/latest/download/latest}" "$tmp/latest"
    version=$(head -n 1 "$tmp/latest" | tr -d ' \r')
  fi
  version=${version#v}
  case "$version" in
    '' | *[!0-9A-Za-z.+-]*) fail "not a version: '$version'" ;;
  esac

  archive="tinyagent-$version-$target.tar.gz"
  url="${base:-$REPOSITORY/releases/download}/v$version/$archive"
  download "$url" "$tmp/$archive"
  download "$url.sha256" "$tmp/$archive.sha256"
  expected=$(cut -d ' ' -f 1 <"$tmp/$archive.sha256" | head -n 1)
  actual=$(sha256_of "$tmp/$archive")
  [ "$expected" = "$actual" ] ||
    fail "checksum mismatch for $archive: expected $expected, got $actual (nothing was installed)"

  mkdir "$tmp/x"
  tar -xzf "$tmp/$archive" -C "$tmp/x" 2>/dev/null || fail "$archive is not a valid archive"
  binary="$tmp/x/tinyagent-$version-$target/tinyagent"
  [ -f "$binary" ] || binary="$tmp/x/tinyagent"
  [ -f "$binary" ] || fail "$archive holds no tinyagent binary"

  dir=${TINYAGENT_INSTALL_DIR:-}
  if [ -z "$dir" ]; then
    [ -n "${HOME:-}" ] || fail "HOME is not set: set TINYAGENT_INSTALL_DIR"
    dir="$HOME/.local/bin"
  fi
  mkdir -p "$dir" 2>/dev/null || fail "cannot create $dir"
  # Copy beside the old binary, then rename over it: never half a binary.
  new="$dir/.tinyagent.$$"
  if ! { cp "$binary" "$new" && chmod 755 "$new" && mv -f "$new" "$dir/tinyagent"; } 2>/dev/null; then
    rm -f "$new"
    fail "cannot write $dir/tinyagent"
  fi

  echo "tinyagent $version installed to $dir/tinyagent"
  case ":$PATH:" in
    *":$dir:"*) echo "$dir is on your PATH: run tinyagent --help" ;;
    *) echo "$dir is not on your PATH: add it with  export PATH=\"$dir:\$PATH\"  (in your shell's profile), or run $dir/tinyagent" ;;
  esac
}

main "$@"
