#!/usr/bin/env bash
# A warm Spark for icepack's `connect` runner: a Spark Connect server (Spark 4.0 from the pyspark
# wheel, Iceberg's Spark 4.0 runtime and AWS bundle), optionally on a standalone Spark cluster
# started from the same distribution. The wheel ships `spark-connect_2.13.jar` but no
# start-connect-server.sh (nor sbin/): the server class runs through spark-submit.
#
#   deploy/local/spark-connect.sh prepare            # install (cached): venv + jars
#   eval "$(deploy/local/spark-connect.sh --env)"    # prepare, then print CONNECT_SPARK_HOME=, CONNECT_SPARK_JARS=
#   deploy/local/spark-connect.sh start DIR PORT [MASTER]   # a server on 127.0.0.1:PORT; waits until it answers
#   deploy/local/spark-connect.sh stop DIR
#   deploy/local/spark-connect.sh cluster-start DIR MASTER_PORT   # a master and one worker; prints MASTER=spark://...
#   deploy/local/spark-connect.sh cluster-stop DIR
#
# DIR holds the pid files and logs (connect.log, master.log, worker.log). The server's own
# environment (AWS_* for S3, SPARK_LOCAL_IP) is this script's: the server, not icepack, reads S3.
# Extra server confs: ICEPACK_CONNECT_CONF="k=v k=v". Versions: deploy/spark/versions.env.
# ICEPACK_CONNECT_OWNER_PID=PID ties a server to a process: once PID has exited, a watcher stops
# the server and removes DIR (the tests' shared server is never stopped by its process).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../spark/versions.env
. "$HERE/../spark/versions.env"

CACHE="${ICEPACK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/icepack/spark}"
MAVEN_REPO_URL="${MAVEN_REPO_URL:-https://repo1.maven.org/maven2}"
VENV="$CACHE/connect-venv"
JARS="$CACHE/connect-jars"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"

log() { echo "[spark-connect] $*" >&2; }

prepare() {
  command -v java >/dev/null 2>&1 || { apt-get update -qq >&2; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >&2; }
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || { apt-get update -qq >&2; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2; }
  mkdir -p "$CACHE" "$JARS"
  local installed=""
  [[ -x "$VENV/bin/python" ]] && installed="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("pyspark"))' 2>/dev/null || true)"
  if [[ "$installed" != "$CONNECT_PYSPARK_VERSION" ]]; then
    log "installing pyspark==$CONNECT_PYSPARK_VERSION into $VENV (found: '${installed:-none}')"
    [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV" >&2
    "$VENV/bin/pip" install -q --disable-pip-version-check "pyspark==$CONNECT_PYSPARK_VERSION" >&2
  fi
  local artifacts=(
    "org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:${CONNECT_ICEBERG_VERSION}"
    "org.apache.iceberg:iceberg-aws-bundle:${CONNECT_ICEBERG_VERSION}"
    "org.xerial:sqlite-jdbc:${SQLITE_JDBC_VERSION}"
  )
  local keep=() g a v dest url
  for gav in "${artifacts[@]}"; do
    IFS=: read -r g a v <<<"$gav"
    dest="$JARS/$a-$v.jar"
    keep+=("$dest")
    [[ -s "$dest" ]] && continue
    log "downloading $gav"
    url="$MAVEN_REPO_URL/${g//.//}/$a/$v/$a-$v.jar"
    curl -fsSL --retry 3 --max-time 600 -o "$dest.part" "$url"
    local want got
    want="$(curl -fsSL --retry 3 --max-time 60 "$url.sha1" | awk '{print $1}')"
    got="$(sha1sum "$dest.part" | awk '{print $1}')"
    [[ "$want" == "$got" ]] || { rm -f "$dest.part"; echo "sha1 mismatch for $url" >&2; exit 1; }
    mv "$dest.part" "$dest"
  done
  CONNECT_SPARK_HOME="$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
  mkdir -p "$CONNECT_SPARK_HOME/conf"
  ls "$CONNECT_SPARK_HOME"/jars/spark-connect_*.jar >/dev/null 2>&1 || { echo "no spark-connect jar in $CONNECT_SPARK_HOME/jars" >&2; exit 1; }
  CONNECT_SPARK_JARS="$(printf '%s\n' "${keep[@]}" | paste -sd, -)"
}

port_answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() { # what seconds command...
  local what="$1" seconds="$2"; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    if ((SECONDS >= deadline)); then log "$what did not come up in ${seconds} s"; return 1; fi
    sleep 0.5
  done
}

stop_pid() { # pidfile
  [[ -f "$1" ]] || return 0
  local pid; pid="$(cat "$1")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}

cmd="${1:-}"
case "$cmd" in
  prepare)
    prepare
    log "ready: $CONNECT_SPARK_HOME"
    ;;
  --env)
    prepare
    echo "CONNECT_SPARK_HOME=$CONNECT_SPARK_HOME"
    echo "CONNECT_SPARK_JARS=$CONNECT_SPARK_JARS"
    ;;
  start)
    [[ $# -ge 3 ]] || { echo "usage: $0 start DIR PORT [MASTER]" >&2; exit 2; }
    dir="$2" port="$3" master="${4:-local[2]}"
    mkdir -p "$dir"
    prepare
    confs=(
      --conf spark.sql.extensions=org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions
      --conf spark.sql.catalogImplementation=in-memory
      --conf spark.ui.enabled=false
      --conf spark.connect.grpc.binding.address=127.0.0.1
      --conf "spark.connect.grpc.binding.port=$port"
      --conf spark.driver.memory=1g
    )
    for extra in ${ICEPACK_CONNECT_CONF:-}; do confs+=(--conf "$extra"); done
    # Own process group, so `stop` ends the JVM and nothing else; stdin closed.
    (cd "$dir" && exec setsid "$CONNECT_SPARK_HOME/bin/spark-submit" \
      --class org.apache.spark.sql.connect.service.SparkConnectServer \
      --name icepack-connect --master "$master" --jars "$CONNECT_SPARK_JARS" \
      --driver-class-path "${CONNECT_SPARK_JARS//,/:}" "${confs[@]}" \
      spark-internal </dev/null >"$dir/connect.log" 2>&1) &
    echo $! >"$dir/connect.pid"
    wait_for "Spark Connect server on $port" 90 port_answers "$port" || { tail -n 30 "$dir/connect.log" >&2; exit 1; }
    if [[ -n "${ICEPACK_CONNECT_OWNER_PID:-}" ]]; then
      # Watches while the server runs (its pid file is there); detached, its output nowhere, so
      # whoever reads this script's output is not kept waiting.
      (exec setsid bash -c '
        while kill -0 "$1" 2>/dev/null && [[ -f "$2/connect.pid" ]]; do sleep 2; done
        if ! kill -0 "$1" 2>/dev/null && [[ -f "$2/connect.pid" ]]; then "$3" stop "$2"; rm -rf "$2"; fi
      ' watch "$ICEPACK_CONNECT_OWNER_PID" "$dir" "$HERE/spark-connect.sh" </dev/null >/dev/null 2>&1) &
    fi
    log "Spark Connect server on sc://127.0.0.1:$port (master $master), log $dir/connect.log"
    echo "CONNECT_URL=sc://127.0.0.1:$port"
    ;;
  stop)
    [[ $# -eq 2 ]] || { echo "usage: $0 stop DIR" >&2; exit 2; }
    stop_pid "$2/connect.pid"
    ;;
  cluster-start)
    [[ $# -eq 3 ]] || { echo "usage: $0 cluster-start DIR MASTER_PORT" >&2; exit 2; }
    dir="$2" port="$3"
    mkdir -p "$dir"
    prepare
    (cd "$dir" && exec setsid "$CONNECT_SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
      --host 127.0.0.1 --port "$port" --webui-port 0 </dev/null >"$dir/master.log" 2>&1) &
    echo $! >"$dir/master.pid"
    wait_for "Spark master on $port" 60 port_answers "$port" || { tail -n 30 "$dir/master.log" >&2; exit 1; }
    (cd "$dir" && exec setsid "$CONNECT_SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
      "spark://127.0.0.1:$port" --host 127.0.0.1 --cores 2 --memory 2g --webui-port 0 --work-dir "$dir/work" \
      </dev/null >"$dir/worker.log" 2>&1) &
    echo $! >"$dir/worker.pid"
    wait_for "Spark worker registration" 60 grep -q "Successfully registered with master" "$dir/worker.log" \
      || { tail -n 30 "$dir/worker.log" >&2; exit 1; }
    log "standalone cluster: master spark://127.0.0.1:$port, one worker"
    echo "MASTER=spark://127.0.0.1:$port"
    ;;
  cluster-stop)
    [[ $# -eq 2 ]] || { echo "usage: $0 cluster-stop DIR" >&2; exit 2; }
    stop_pid "$2/worker.pid"
    stop_pid "$2/master.pid"
    ;;
  *)
    echo "usage: $0 prepare|--env|start|stop|cluster-start|cluster-stop ..." >&2
    exit 2
    ;;
esac
