#!/usr/bin/env bash
# ElasticMQ (an SQS server on the JVM, independent of moto) for the SQS tests and benchmark: the
# server jar and its dependencies from Maven Central, under a cache dir. Each test starts its own
# server (tests/integration/support/elasticmq.rs): `java -cp $ICEPACK_TEST_ELASTICMQ_CLASSPATH
# -Dconfig.file=... org.elasticmq.server.Main`.
#
#   deploy/local/elasticmq.sh prepare                # install (idempotent, fast when cached)
#   eval "$(deploy/local/elasticmq.sh --env)"        # prepare, then print only KEY=VALUE lines
#   export ICEPACK_TEST_ELASTICMQ_CLASSPATH           # eval only sets it: export it for cargo
#                                                     # (or: set -a; eval ...; set +a)
#
# Env:
#   ELASTICMQ_VERSION   default 1.7.1 (the newest 1.7.x on Maven Central)
#   MAVEN_REPO_URL      Maven repository base (default https://repo1.maven.org/maven2)
#
# Layout: ${XDG_CACHE_HOME:-$HOME/.cache}/icepack/elasticmq/<version>/
#   pom.xml   the generated pom that names the server
#   jars/     the server jar and its runtime dependencies
#   mvn.log   the last fetch's Maven output
#   .complete written once jars/ is whole
set -euo pipefail

ELASTICMQ_VERSION="${ELASTICMQ_VERSION:-1.7.1}"
MAVEN_REPO_URL="${MAVEN_REPO_URL:-https://repo1.maven.org/maven2}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/icepack/elasticmq/$ELASTICMQ_VERSION"
JARS="$CACHE/jars"

mode="${1:-prepare}"
case "$mode" in
  prepare | --env) ;;
  *) echo "usage: $0 [prepare|--env]" >&2; exit 2 ;;
esac

log() { echo "[elasticmq] $*" >&2; }

# ---------------------------------------------------------------- prerequisites
need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
if ((${#need_apt[@]})); then
  log "apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq "${need_apt[@]}" >&2
fi

# ---------------------------------------------------------------- jars
if [[ -f "$CACHE/.complete" ]]; then
  log "elasticmq-server $ELASTICMQ_VERSION already in $JARS"
else
  log "fetching org.elasticmq:elasticmq-server_2.13:$ELASTICMQ_VERSION and its dependencies"
  started=$SECONDS
  mkdir -p "$CACHE"
  rm -rf "$JARS"
  cat >"$CACHE/pom.xml" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>icepack.local</groupId>
  <artifactId>elasticmq-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <repositories>
    <repository><id>central</id><url>$MAVEN_REPO_URL</url></repository>
  </repositories>
  <dependencies>
    <dependency>
      <groupId>org.elasticmq</groupId>
      <artifactId>elasticmq-server_2.13</artifactId>
      <version>$ELASTICMQ_VERSION</version>
    </dependency>
  </dependencies>
</project>
POM
  if ! mvn -B -f "$CACHE/pom.xml" \
    org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$JARS" >"$CACHE/mvn.log" 2>&1; then
    tail -n 40 "$CACHE/mvn.log" >&2
    echo "mvn could not fetch elasticmq-server $ELASTICMQ_VERSION (log: $CACHE/mvn.log)" >&2
    exit 1
  fi
  ls "$JARS"/elasticmq-server_2.13-"$ELASTICMQ_VERSION".jar >/dev/null
  touch "$CACHE/.complete"
  log "$(find "$JARS" -name '*.jar' | wc -l) jars, $(du -sh "$JARS" | cut -f1) in $((SECONDS - started)) s"
fi

CLASSPATH_VALUE="$(find "$JARS" -name '*.jar' | sort | paste -sd: -)"
if [[ $mode == --env ]]; then
  echo "ICEPACK_TEST_ELASTICMQ_CLASSPATH=$CLASSPATH_VALUE"
else
  log "ready: $(find "$JARS" -name '*.jar' | wc -l) jars in $JARS"
fi
