#!/usr/bin/env bash
# Static checks of icepack's deployment assets (no Docker, no cluster, no registry needed):
#
#   deploy/check/lint-deploy.sh [PATH_TO_ICEPACK_BINARY]
#
#   1. helm (installed once with `go install`, cached under $ICEPACK_TOOLS_DIR)
#      - helm lint deploy/helm/icepack (default values and a values set exercising every option)
#      - helm template: output parses as YAML, has the expected kinds, probes, security context,
#        Recreate strategy, secret references; the rendered icepack.toml passes
#        `icepack check-config` when a binary is given
#   2. deploy/docker-compose.yml: compose-go (the loader `docker compose` uses; built once from
#      deploy/check/compose-config) validates it against the Compose schema, for the default
#      and the observability profile; then deploy/check/validate-compose.py [binary]
#      (references, paths, Dockerfile COPY sources, ports, cycles, icepack config consistency)
#      and shell syntax (+ shellcheck when installed) of deploy/compose/*.sh, deploy/check/*.sh
#   3. deploy/grafana/icepack.json: JSON parses, every expr uses only icepack's metric names
#      and labels; with a binary, `icepack run` (loopback only) must export every one of them
#
# CI: `deploy/check/lint-deploy.sh target/release/icepack` (no Docker, cluster or registry).
#
# Env: ICEPACK_TOOLS_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/icepack/tools),
#      HELM_VERSION (default v3.19.5), HELM (use this helm binary instead of installing one).
# Exit status non-zero on any failure; every check prints one line.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
INSTALL_ONLY=0
if [[ "${1:-}" == "--install-only" ]]; then INSTALL_ONLY=1; shift; fi
BIN="${1:-}"
if [[ -n "$BIN" ]]; then
  [[ -x "$BIN" ]] || { echo "lint-deploy: $BIN is not an executable" >&2; exit 2; }
  BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
fi

HELM_VERSION="${HELM_VERSION:-v3.19.5}"
TOOLS="${ICEPACK_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/icepack/tools}"
CHART="deploy/helm/icepack"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

T0=$SECONDS
step_t0=$SECONDS
FAILURES=0
log() { echo "[lint-deploy] $*"; }
ok() { echo "[lint-deploy] ok   $*"; }
fail() { echo "[lint-deploy] FAIL $*" >&2; FAILURES=$((FAILURES + 1)); }
took() { log "$1 took $((SECONDS - step_t0)) s"; step_t0=$SECONDS; }

# ------------------------------------------------------------------ tools
ensure_pyyaml() {
  python3 -c 'import yaml' 2>/dev/null && return 0
  log "installing PyYAML"
  if command -v apt-get >/dev/null 2>&1 && [[ $EUID -eq 0 ]]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-yaml >/dev/null 2>&1 ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-yaml >/dev/null; }
  else
    python3 -m pip install --user --quiet pyyaml || python3 -m pip install --user --quiet --break-system-packages pyyaml
  fi
  python3 -c 'import yaml'
}

ensure_helm() {
  if [[ -n "${HELM:-}" ]]; then
    return 0
  fi
  HELM="$TOOLS/bin/helm"
  if [[ -x "$HELM" ]] && "$HELM" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
    return 0
  fi
  command -v go >/dev/null 2>&1 || { echo "lint-deploy: go is needed to install helm (or set HELM=/path/to/helm)" >&2; exit 2; }
  log "installing helm $HELM_VERSION with go install into $TOOLS/bin (first time only; a few minutes on 2 cores)"
  mkdir -p "$TOOLS/bin"
  local t=$SECONDS
  GOBIN="$TOOLS/bin" GOFLAGS=-buildvcs=false CGO_ENABLED=0 \
    go install -ldflags "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  log "helm install took $((SECONDS - t)) s"
  "$HELM" version --template '{{.Version}}' | grep -qx "$HELM_VERSION" ||
    { echo "lint-deploy: installed helm does not report $HELM_VERSION" >&2; exit 2; }
}

ensure_pyyaml
ensure_helm
if ((INSTALL_ONLY)); then
  log "helm: $("$HELM" version --short)"; exit 0
fi
took "tools"

run() { # run LABEL CMD...: prints the command's output, records a failure
  local label="$1"; shift
  if "$@"; then ok "$label"; else fail "$label"; fi
}

# ------------------------------------------------------------------ helm
log "helm $("$HELM" version --template '{{.Version}}'), chart $CHART"
run "helm lint $CHART (default values)" "$HELM" lint --strict "$CHART"
run "helm lint $CHART (ci/full-values.yaml)" "$HELM" lint --strict "$CHART" -f "$CHART/ci/full-values.yaml"
took "helm lint"

render_and_check() { # LABEL EXPECTED_KINDS HELM_ARGS...
  local label="$1" kinds="$2"; shift 2
  local out="$WORK/render.yaml"
  if ! "$HELM" template icepack "$CHART" --namespace lakehouse "$@" >"$out" 2>"$WORK/render.err"; then
    cat "$WORK/render.err" >&2; fail "helm template ($label)"; return
  fi
  run "helm template ($label): YAML, kinds, Deployment, Service, icepack.toml${BIN:+, check-config}" \
    python3 deploy/check/check-helm-output.py --label "$label" --expect-kinds "$kinds" ${BIN:+--binary "$BIN"} <"$out"
}
render_and_check "default values" "ConfigMap,Deployment,PersistentVolumeClaim,Service,ServiceAccount"
render_and_check "ci/full-values.yaml" \
  "ConfigMap,Deployment,PersistentVolumeClaim,Role,RoleBinding,Service,ServiceAccount,ServiceMonitor" \
  -f "$CHART/ci/full-values.yaml"
render_and_check "persistence off, existing ServiceAccount" "ConfigMap,Deployment,Service" \
  --set persistence.enabled=false --set serviceAccount.create=false --set serviceAccount.name=icepack
# A chart that must refuse: no table.
if "$HELM" template icepack "$CHART" --set 'config.tables=null' >/dev/null 2>"$WORK/err"; then
  fail "helm template without tables should fail"
else
  ok "helm template without tables fails: $(grep -o 'icepack: .*' "$WORK/err" | head -1)"
fi
took "helm template checks"

# ------------------------------------------------------------------ compose
# compose-go (the loader of `docker compose`): schema validation, interpolation, references.
ensure_compose_config() {
  local src=deploy/check/compose-config hash
  hash="$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-12)"
  COMPOSE_CONFIG="$TOOLS/bin/compose-config-$hash"
  if [[ ! -x "$COMPOSE_CONFIG" ]]; then
    log "building deploy/check/compose-config (compose-go) into $TOOLS/bin (first time only)"
    local t=$SECONDS
    mkdir -p "$TOOLS/bin"
    (cd "$src" && GOFLAGS=-buildvcs=false CGO_ENABLED=0 go build -o "$COMPOSE_CONFIG.tmp" .) && mv "$COMPOSE_CONFIG.tmp" "$COMPOSE_CONFIG"
    log "compose-config build took $((SECONDS - t)) s"
  fi
}
if command -v go >/dev/null 2>&1 && ensure_compose_config; then
  run "compose-go: deploy/docker-compose.yml (default profile)" "$COMPOSE_CONFIG" -q -f deploy/docker-compose.yml
  run "compose-go: deploy/docker-compose.yml (--profile observability)" \
    "$COMPOSE_CONFIG" -q -f deploy/docker-compose.yml --profile observability
else
  fail "compose-go loader unavailable (needs go)"
fi
run "docker-compose.yml${BIN:+ (with icepack check-config)}" \
  python3 deploy/check/validate-compose.py deploy/docker-compose.yml ${BIN:+"$BIN"}
for f in deploy/compose/*.sh deploy/check/*.sh; do
  case "$(head -n1 "$f")" in
    *bash*) run "bash -n $f" bash -n "$f" ;;
    *) run "sh -n $f" sh -n "$f" ;;
  esac
done
if command -v shellcheck >/dev/null 2>&1; then
  run "shellcheck deploy/compose/*.sh deploy/check/*.sh" shellcheck deploy/compose/*.sh deploy/check/*.sh
else
  log "shellcheck not installed: skipped (apt-get install shellcheck to add it)"
fi
took "compose checks"

# ------------------------------------------------------------------ grafana
run "grafana dashboard deploy/grafana/icepack.json${BIN:+ (+ metric names exported by icepack run)}" \
  python3 deploy/check/validate-dashboard.py deploy/grafana/icepack.json docs/operations.md ${BIN:+--binary "$BIN"}
took "dashboard checks"

if [[ -z "$BIN" ]]; then
  log "note: no icepack binary given: check-config of the compose and chart configurations skipped"
fi
if ((FAILURES)); then
  log "$FAILURES check(s) FAILED ($((SECONDS - T0)) s)"
  exit 1
fi
log "all checks passed ($((SECONDS - T0)) s)"
