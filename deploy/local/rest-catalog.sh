#!/usr/bin/env bash
# Iceberg's REST catalog server (the one behind the apache/iceberg-rest-fixture image), run from
# Maven Central jars without a container: `org.apache.iceberg.rest.RESTCatalogServer` of
# iceberg-open-api's `test-fixtures` jar, over a JDBC catalog on SQLite, with S3FileIO.
#
#   deploy/local/rest-catalog.sh prepare         assemble the classpath (cached; fast when done)
#   eval "$(deploy/local/rest-catalog.sh --env)" prepare, then print ICEPACK_REST_CATALOG_CLASSPATH
#   deploy/local/rest-catalog.sh run DIR S3_ENDPOINT WAREHOUSE [PORT]
#                                                serve in the foreground (exec java): catalog
#                                                database DIR/catalog.db, log on stdout; PORT
#                                                defaults to a free one, printed first
#
# The server reads CATALOG_* variables as catalog properties (CATALOG_WAREHOUSE, CATALOG_URI,
# CATALOG_IO__IMPL = io-impl, CATALOG_S3_ENDPOINT ...) and CATALOG_REST_PORT for its port (8181
# without it; REST_PORT is ignored). S3 credentials come from the usual AWS_* variables.
#
# Env: ICEPACK_CACHE_DIR (default ~/.cache/icepack), REST_CATALOG_ICEBERG_VERSION, JETTY_VERSION,
# HADOOP_VERSION, MAVEN_REPO_URL (see deploy/spark/versions.env).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../spark/versions.env
. "$HERE/../spark/versions.env"

: "${REST_CATALOG_ICEBERG_VERSION:=$ICEBERG_VERSION}"
: "${JETTY_VERSION:=11.0.25}"
: "${HADOOP_VERSION:=3.4.1}"
: "${SLF4J_VERSION:=2.0.17}"
CACHE="${ICEPACK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/icepack}/rest-catalog/$REST_CATALOG_ICEBERG_VERSION"
LIB="$CACHE/lib"

log() { echo "[rest-catalog] $*" >&2; }

prepare() {
  if [[ -f "$CACHE/.complete" ]]; then
    return
  fi
  local need_apt=()
  command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
  if ((${#need_apt[@]})); then
    log "apt-get install ${need_apt[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >&2
  fi
  log "assembling the REST catalog server (Iceberg $REST_CATALOG_ICEBERG_VERSION) from Maven"
  rm -rf "$CACHE"
  mkdir -p "$CACHE"
  dep() { # groupId artifactId version [classifier]
    printf '    <dependency><groupId>%s</groupId><artifactId>%s</artifactId><version>%s</version>%s</dependency>\n' \
      "$1" "$2" "$3" "${4:+<classifier>$4</classifier>}"
  }
  {
    cat <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.icepack.local</groupId>
  <artifactId>rest-catalog</artifactId>
  <version>1</version>
  <dependencies>
EOF
    local iceberg=org.apache.iceberg v=$REST_CATALOG_ICEBERG_VERSION
    dep $iceberg iceberg-open-api "$v" test-fixtures
    dep $iceberg iceberg-core "$v"
    dep $iceberg iceberg-core "$v" tests
    dep $iceberg iceberg-aws "$v"
    dep $iceberg iceberg-aws-bundle "$v"
    dep org.eclipse.jetty jetty-server "$JETTY_VERSION"
    dep org.eclipse.jetty jetty-servlet "$JETTY_VERSION"
    dep org.xerial sqlite-jdbc "$SQLITE_JDBC_VERSION"
    dep org.apache.hadoop hadoop-client-api "$HADOOP_VERSION"
    dep org.apache.hadoop hadoop-client-runtime "$HADOOP_VERSION"
    dep org.slf4j slf4j-simple "$SLF4J_VERSION"
    cat <<EOF
  </dependencies>
</project>
EOF
  } >"$CACHE/pom.xml"
  local repo=()
  [[ -n "${MAVEN_REPO_URL:-}" ]] && repo=("-DremoteRepositories=$MAVEN_REPO_URL")
  if ! mvn -q -B -f "$CACHE/pom.xml" "${repo[@]}" dependency:copy-dependencies \
    -DoutputDirectory="$LIB" -DincludeScope=runtime >"$CACHE/maven.log" 2>&1; then
    tail -n 30 "$CACHE/maven.log" >&2
    log "Maven could not assemble the classpath (log: $CACHE/maven.log)"
    exit 1
  fi
  touch "$CACHE/.complete"
  log "$(find "$LIB" -name '*.jar' | wc -l) jars, $(du -sh "$LIB" | cut -f1) in $LIB"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

case "${1:-prepare}" in
  prepare)
    prepare
    ;;
  --env)
    prepare
    echo "ICEPACK_REST_CATALOG_CLASSPATH=$LIB/*"
    ;;
  run)
    [[ $# -ge 4 ]] || {
      echo "usage: $0 run DIR S3_ENDPOINT WAREHOUSE [PORT]" >&2
      exit 2
    }
    prepare
    dir=$2 endpoint=$3 warehouse=$4 port=${5:-$(free_port)}
    mkdir -p "$dir"
    echo "port $port"
    export CATALOG_REST_PORT=$port
    export CATALOG_WAREHOUSE=$warehouse
    export CATALOG_URI="jdbc:sqlite:$dir/catalog.db"
    export CATALOG_JDBC_USER=user CATALOG_JDBC_PASSWORD=password
    export CATALOG_IO__IMPL=org.apache.iceberg.aws.s3.S3FileIO
    export CATALOG_S3_ENDPOINT=$endpoint
    export CATALOG_S3_PATH__STYLE__ACCESS=true
    export CATALOG_CLIENT_REGION=${AWS_REGION:-us-east-1}
    exec java -Xmx512m -cp "$LIB/*" org.apache.iceberg.rest.RESTCatalogServer
    ;;
  *)
    echo "usage: $0 [prepare | --env | run DIR S3_ENDPOINT WAREHOUSE [PORT]]" >&2
    exit 2
    ;;
esac
