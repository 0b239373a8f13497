#!/usr/bin/env bash
# Installs what building and testing icepack needs on a fresh Debian machine, idempotently:
# the system RocksDB (linked instead of compiling RocksDB from source), clang for its bindings,
# protoc for the Spark Connect protocol crate, moto (S3 + SQS server) for the demo and the
# integration tests; and for the tests and lints only, Chromium for the operator page's browser
# test and cargo-deny. Fast when everything is already there.
#
#   deploy/local/install-deps.sh          everything (`make test`, `make lint`, the stack)
#   deploy/local/install-deps.sh build    building icepack and running the demo only
set -euo pipefail
scope=${1:-all}
case "$scope" in
  all | build) ;;
  *) echo "usage: $0 [all|build]" >&2; exit 2 ;;
esac

log() { printf '\033[1m[deps]\033[0m %s\n' "$*" >&2; }

apt_packages=(librocksdb-dev clang libclang-dev pkg-config curl protobuf-compiler)
[ "$scope" = build ] || apt_packages+=(chromium)
missing=()
for package in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v moto_server >/dev/null 2>&1 || ! python3 -c 'import moto.server, flask' >/dev/null 2>&1; then
  log "installing moto[server] from PyPI"
  python3 -m pip install --quiet --disable-pip-version-check 'moto[server]==5.2.*'
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is missing: install Rust with rustup first" >&2
  exit 1
fi

# cargo-deny for `make lint` (licences, bans, sources; deny.toml): built once from crates.io into
# ~/.cargo/bin, in a target directory of its own. A debug build: cargo-deny's release profile
# (fat LTO, one codegen unit) took 2 min 47 s on 2 cores, the debug build 1 min 4 s, and the
# check it runs here takes 4 s instead of 1.
if [ "$scope" = all ] && ! cargo deny --version 2>/dev/null | grep -q "^cargo-deny 0.20.2"; then
  log "installing cargo-deny 0.20.2 from crates.io"
  CARGO_TARGET_DIR="${HOME}/.cache/icepack/cargo-deny-target" cargo install --quiet --locked --debug cargo-deny --version 0.20.2
fi
log "dependencies ready"
