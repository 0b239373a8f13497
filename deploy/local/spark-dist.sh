#!/usr/bin/env bash
# Make a Spark 3.5 distribution (from the pyspark wheel) and the Iceberg / SQLite
# jars available on the host, under a cache dir.
#
#   deploy/local/spark-dist.sh            # prepare (idempotent, fast when cached)
#   eval "$(deploy/local/spark-dist.sh --env)"   # prepare, then print only KEY=VALUE lines
#
# Env:
#   ICEPACK_CACHE_DIR   cache root (default ~/.cache/icepack/spark)
#   PYSPARK_VERSION, ICEBERG_VERSION, SQLITE_JDBC_VERSION  (see deploy/spark/versions.env)
#   MAVEN_REPO_URL      Maven repository base (default https://repo1.maven.org/maven2)
#
# Layout:
#   $ICEPACK_CACHE_DIR/venv/                       python venv holding pyspark
#   $ICEPACK_CACHE_DIR/venv/lib/python3.X/site-packages/pyspark  == SPARK_HOME
#   $ICEPACK_CACHE_DIR/jars/                       the extra jars (iceberg runtime, aws bundle, sqlite-jdbc)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../spark/versions.env
. "$HERE/../spark/versions.env"

CACHE="${ICEPACK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/icepack/spark}"
MAVEN_REPO_URL="${MAVEN_REPO_URL:-https://repo1.maven.org/maven2}"
VENV="$CACHE/venv"
JARS="$CACHE/jars"

ENV_ONLY=0
[[ "${1:-}" == "--env" ]] && ENV_ONLY=1

log() { if [[ $ENV_ONLY == 1 ]]; then echo "[spark-dist] $*" >&2; else echo "[spark-dist] $*"; fi; }

mkdir -p "$CACHE" "$JARS"

# ---------------------------------------------------------------- prerequisites
need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
command -v curl >/dev/null 2>&1 || need_apt+=(curl ca-certificates)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
if ((${#need_apt[@]})); then
  log "apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq "${need_apt[@]}" >&2
fi

# ---------------------------------------------------------------- pyspark
spark_home_of_venv() {
  "$VENV/bin/python" - <<'PY'
import os, importlib.util
spec = importlib.util.find_spec("pyspark")
print(os.path.dirname(spec.origin))
PY
}

installed_pyspark=""
if [[ -x "$VENV/bin/python" ]]; then
  installed_pyspark="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("pyspark"))' 2>/dev/null || true)"
fi
if [[ "$installed_pyspark" != "$PYSPARK_VERSION" ]]; then
  log "installing pyspark==$PYSPARK_VERSION into $VENV (found: '${installed_pyspark:-none}')"
  t0=$SECONDS
  [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check "pyspark==$PYSPARK_VERSION" >&2
  log "pyspark installed in $((SECONDS - t0)) s"
else
  log "pyspark $installed_pyspark already in $VENV"
fi
SPARK_HOME="$(spark_home_of_venv)"
[[ -x "$SPARK_HOME/bin/spark-sql" ]] || { echo "spark-sql missing under $SPARK_HOME" >&2; exit 1; }
# the pip layout has no conf/ dir; spark-class/load-spark-env tolerate that, but create it
mkdir -p "$SPARK_HOME/conf"

# ---------------------------------------------------------------- jars
ARTIFACTS=(
  "org.apache.iceberg:iceberg-spark-runtime-3.5_${SCALA_BINARY_VERSION}:${ICEBERG_VERSION}"
  "org.apache.iceberg:iceberg-aws-bundle:${ICEBERG_VERSION}"
  "org.xerial:sqlite-jdbc:${SQLITE_JDBC_VERSION}"
)

fetch_with_curl() { # group artifact version dest
  local g="$1" a="$2" v="$3" dest="$4"
  local url="$MAVEN_REPO_URL/${g//.//}/$a/$v/$a-$v.jar"
  local tmp="$dest.part"
  curl -fsSL --retry 3 --max-time 600 -o "$tmp" "$url" || return 1
  local want got
  want="$(curl -fsSL --retry 3 --max-time 60 "$url.sha1" | awk '{print $1}')" || return 1
  got="$(sha1sum "$tmp" | awk '{print $1}')"
  if [[ "$want" != "$got" ]]; then
    echo "sha1 mismatch for $url: want $want got $got" >&2
    rm -f "$tmp"; return 1
  fi
  mv "$tmp" "$dest"
}

fetch_with_mvn() { # group artifact version destdir
  command -v mvn >/dev/null 2>&1 || { apt-get update -qq >&2; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >&2; }
  mvn -B -q org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy \
    -Dartifact="$1:$2:$3:jar" -DoutputDirectory="$4" -Dmdep.overWriteIfNewer=true >&2
}

for gav in "${ARTIFACTS[@]}"; do
  IFS=: read -r g a v <<<"$gav"
  dest="$JARS/$a-$v.jar"
  if [[ -s "$dest" ]]; then
    log "jar ok: $(basename "$dest")"
    continue
  fi
  log "downloading $gav"
  if ! fetch_with_curl "$g" "$a" "$v" "$dest"; then
    log "curl download failed, falling back to mvn dependency:copy"
    fetch_with_mvn "$g" "$a" "$v" "$JARS"
  fi
  [[ -s "$dest" ]] || { echo "could not fetch $gav" >&2; exit 1; }
done

# drop jars of other versions left from earlier runs (keeps --jars "$JARS/*" unambiguous)
keep=()
for gav in "${ARTIFACTS[@]}"; do IFS=: read -r g a v <<<"$gav"; keep+=("$a-$v.jar"); done
for f in "$JARS"/*.jar; do
  b="$(basename "$f")"
  [[ " ${keep[*]} " == *" $b "* ]] || { log "removing stale $b"; rm -f "$f"; }
done

JAR_LIST="$(printf '%s\n' "${keep[@]/#/$JARS/}" | paste -sd, -)"

if [[ $ENV_ONLY == 1 ]]; then
  echo "SPARK_HOME=$SPARK_HOME"
  echo "ICEPACK_SPARK_JARS_DIR=$JARS"
  echo "ICEPACK_SPARK_JARS=$JAR_LIST"
else
  log "done"
  echo "SPARK_HOME=$SPARK_HOME"
  echo "ICEPACK_SPARK_JARS_DIR=$JARS"
  echo "ICEPACK_SPARK_JARS=$JAR_LIST"
fi
