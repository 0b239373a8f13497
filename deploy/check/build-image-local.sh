#!/usr/bin/env bash
# Builds deploy/Dockerfile WITHOUT an image registry, and smoke-tests the image, on a machine
# with podman (no Docker daemon). For machines with a registry, `docker build -f deploy/Dockerfile .`
# is all there is to it; this script exists to verify the Dockerfile where rust:1-bookworm and
# debian:bookworm-slim cannot be pulled.
#
#   deploy/check/build-image-local.sh [--with-spark]
#
# Stand-ins for the base images (both Debian bookworm, like the real ones):
#   RUST_IMAGE     localhost/icepack-rust-standin:bookworm = the registry-free bookworm image of
#                  deploy/spark/build-image-rootfs.sh + gcc; the host's rustup toolchain and
#                  cargo are mounted read-only into the build (podman build -v), not copied.
#   RUNTIME_IMAGE  localhost/icepack-spark:3.5 (a bookworm root file system; it carries a JRE
#                  the real debian:bookworm-slim has not, which changes nothing for icepack:
#                  the runtime stage still installs librocksdb7.8 itself).
# Then checks: `icepack --version`, uid 10001, check-config of deploy/compose/icepack.toml,
# `icepack run` answering /healthz (the image's HEALTHCHECK command) and /metrics, and, with
# --with-spark, the with-spark target running spark-sql --version as uid 10001.
#
# Needs root, podman, a rustup toolchain in $RUSTUP_HOME (default ~/.rustup) and
# localhost/icepack-spark:3.5 (deploy/spark/build-image-rootfs.sh builds it, cached).
# Reaches deb.debian.org and crates.io during the build. Timings are printed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
WITH_SPARK=0
[[ "${1:-}" == "--with-spark" ]] && WITH_SPARK=1
BASE="${ICEPACK_STANDIN_BASE:-localhost/icepack-spark:3.5}"
RUST_STANDIN=localhost/icepack-rust-standin:bookworm
TAG="${ICEPACK_IMAGE_TAG:-localhost/icepack:dev}"
RUSTUP_DIR="${RUSTUP_HOME:-$HOME/.rustup}"
CARGO_BIN="${CARGO_HOME:-$HOME/.cargo}/bin"
log() { echo "[build-image-local] $*" >&2; }
T0=$SECONDS

command -v podman >/dev/null || { log "podman is needed"; exit 2; }
podman image exists "$BASE" || {
  log "$BASE missing: building it with deploy/spark/build-image-rootfs.sh"
  deploy/spark/build-image-rootfs.sh "$BASE"
}
[[ -d "$RUSTUP_DIR/toolchains" && -x "$CARGO_BIN/cargo" ]] || { log "no rustup toolchain at $RUSTUP_DIR"; exit 2; }

# ------------------------------------------------------------------ stand-in build image
if ! podman image exists "$RUST_STANDIN"; then
  t=$SECONDS
  ctx="$(mktemp -d)"
  cat >"$ctx/Containerfile" <<EOF
FROM $BASE
USER root
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      gcc libc6-dev make pkg-config git && rm -rf /var/lib/apt/lists/*
ENV RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo \
    PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /
EOF
  podman build --network host -t "$RUST_STANDIN" "$ctx" >&2
  rm -rf "$ctx"
  log "stand-in build image took $((SECONDS - t)) s"
fi

# ------------------------------------------------------------------ the Dockerfile
# Behind a TLS-inspecting proxy the host's CA bundle is needed for crates.io: it is mounted
# read-only into the build's RUN steps (ICEPACK_BUILD_CA_BUNDLE="" to skip).
CA_BUNDLE="${ICEPACK_BUILD_CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}"
CA_MOUNT=()
[[ -n "$CA_BUNDLE" && -f "$CA_BUNDLE" ]] && CA_MOUNT=(-v "$CA_BUNDLE:/etc/ssl/certs/ca-certificates.crt:ro")
build() { # TARGET_ARGS... ; the rust toolchain comes in read-only
  podman build --network host --format docker -f deploy/Dockerfile \
    --build-arg RUST_IMAGE="$RUST_STANDIN" --build-arg RUNTIME_IMAGE="$BASE" --build-arg SPARK_IMAGE="$BASE" \
    -v "$RUSTUP_DIR:/usr/local/rustup:ro" -v "$CARGO_BIN:/usr/local/cargo/bin:ro" "${CA_MOUNT[@]}" \
    "$@" .
}
t=$SECONDS
build -t "$TAG" >&2
log "podman build -f deploy/Dockerfile took $((SECONDS - t)) s"

# ------------------------------------------------------------------ smoke tests
fail() { log "FAIL $*"; exit 1; }
ver="$(podman run --rm --no-healthcheck "$TAG" --version)" || fail "icepack --version"
log "ok   $ver"
uid="$(podman run --rm --no-healthcheck --entrypoint id "$TAG" -u)"
[[ "$uid" == 10001 ]] || fail "runs as uid $uid, expected 10001"
log "ok   runs as uid 10001"
podman run --rm --no-healthcheck -v "$ROOT/deploy/compose/icepack.toml:/etc/icepack/icepack.toml:ro" "$TAG" \
  check-config --config /etc/icepack/icepack.toml >&2 || fail "check-config in the image"
log "ok   check-config of deploy/compose/icepack.toml in the image"

# `icepack run` with nothing to talk to: /healthz answers, /readyz says why it is not ready.
name="icepack-smoke-$$"
cfg="$(mktemp -d)"
sed -e 's#^queue_url = .*#queue_url = "http://127.0.0.1:9/000000000000/none"#' \
    -e 's#^endpoint_url = .*#endpoint_url = "http://127.0.0.1:9"#' \
    deploy/compose/icepack.toml >"$cfg/icepack.toml"
chmod 644 "$cfg/icepack.toml"
podman run -d --no-healthcheck --name "$name" --network host --read-only --tmpfs /tmp -e AWS_ACCESS_KEY_ID=x -e AWS_SECRET_ACCESS_KEY=y \
  -e ICEPACK_SERVICE__HTTP_LISTEN=127.0.0.1:19464 \
  -v "$cfg/icepack.toml:/etc/icepack/icepack.toml:ro" "$TAG" >/dev/null
cleanup() { podman rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$cfg"; }
trap cleanup EXIT
for _ in $(seq 1 30); do
  podman exec "$name" bash -c 'exec 3<>/dev/tcp/127.0.0.1/19464' 2>/dev/null && break
  sleep 1
done
podman exec "$name" bash -c "exec 3<>/dev/tcp/127.0.0.1/19464 && printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3 && head -n1 <&3 | grep -q ' 200'" \
  || { podman logs "$name" >&2; fail "/healthz (the HEALTHCHECK command) did not answer 200"; }
log "ok   icepack run: /healthz 200 (as the image's HEALTHCHECK asks it)"
metrics="$(podman exec "$name" bash -c "exec 3<>/dev/tcp/127.0.0.1/19464 && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3")"
grep -q '^icepack_up' <<<"$metrics" || fail "/metrics has no icepack_up"
log "ok   /metrics: $(grep -c '^icepack_' <<<"$metrics") icepack_ samples"
log "     idle icepack (1 table): $(podman exec "$name" grep VmRSS /proc/1/status | tr -s ' \t' ' ')"
podman stop -t 20 "$name" >/dev/null
code="$(podman inspect "$name" --format '{{.State.ExitCode}}')"
[[ "$code" == 0 ]] || { podman logs "$name" >&2; fail "SIGTERM: exit code $code, expected 0"; }
log "ok   SIGTERM: exit 0"

if ((WITH_SPARK)); then
  t=$SECONDS
  build --target with-spark -t "$TAG-spark" >&2
  log "podman build --target with-spark took $((SECONDS - t)) s"
  uid="$(podman run --rm --no-healthcheck --entrypoint id "$TAG-spark" -u)"
  [[ "$uid" == 10001 ]] || fail "with-spark runs as uid $uid"
  # As the chart runs it: read-only root file system, /tmp and the state volume writable.
  t=$SECONDS
  out="$(podman run --rm --no-healthcheck --read-only --tmpfs /tmp -v icepack-smoke-state:/var/lib/icepack \
      --entrypoint /opt/spark/bin/spark-sql "$TAG-spark" --master 'local[1]' \
      --conf spark.ui.enabled=false --conf spark.sql.catalogImplementation=in-memory \
      --conf spark.sql.extensions=org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions \
      --conf spark.sql.catalog.t=org.apache.iceberg.spark.SparkCatalog --conf spark.sql.catalog.t.type=hadoop \
      --conf spark.sql.catalog.t.warehouse=file:///tmp/wh \
      -e "CREATE TABLE t.db.x (id BIGINT) USING iceberg; INSERT INTO t.db.x VALUES (1), (2);
          CALL t.system.rewrite_data_files(table => 'db.x'); SELECT count(*) AS icepack_rows FROM t.db.x;" 2>&1)" || {
    echo "$out" | tail -30 >&2; fail "spark-sql with Iceberg in the with-spark image"; }
  podman volume rm -f icepack-smoke-state >/dev/null 2>&1 || true
  grep -qx '2' <<<"$out" || { echo "$out" | tail -30 >&2; fail "with-spark: unexpected spark-sql output"; }
  log "ok   with-spark: uid 10001, read-only root: Iceberg CREATE/INSERT/rewrite_data_files in spark-sql ($((SECONDS - t)) s)"
fi
log "all image checks passed ($((SECONDS - T0)) s)"
