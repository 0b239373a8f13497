#!/usr/bin/env bash
# Serve the Docker Engine API from podman on a unix socket (no Docker daemon needed).
#
#   deploy/local/podman-service.sh start  SOCKET_DIR   # prints DOCKER_HOST=unix://SOCKET_DIR/podman.sock
#   deploy/local/podman-service.sh status SOCKET_DIR   # exit 0 if it answers /_ping
#   deploy/local/podman-service.sh stop   SOCKET_DIR
#
# Files in SOCKET_DIR: podman.sock, podman.pid, podman.log.
# Installs podman + runc with apt-get when missing and writes
# /etc/containers/containers.conf (cgroupfs, runc, file events logger) when it
# differs: crun fails on this host's hybrid cgroups, runc works.
set -euo pipefail

usage() { echo "usage: $0 start|stop|status SOCKET_DIR" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
CMD="$1"
mkdir -p "$2"
SOCKET_DIR="$(cd "$2" && pwd)"
SOCK="$SOCKET_DIR/podman.sock"
PIDFILE="$SOCKET_DIR/podman.pid"
LOGFILE="$SOCKET_DIR/podman.log"
DOCKER_HOST_VALUE="unix://$SOCK"

log() { echo "[podman-service] $*" >&2; }

ping_ok() {
  [[ -S "$SOCK" ]] || return 1
  [[ "$(curl -s --max-time 3 --unix-socket "$SOCK" http://d/_ping 2>/dev/null || true)" == "OK" ]]
}

pid_alive() {
  [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

ensure_installed() {
  local missing=()
  command -v podman >/dev/null 2>&1 || missing+=(podman)
  command -v runc >/dev/null 2>&1 || missing+=(runc)
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  if ((${#missing[@]})); then
    log "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq "${missing[@]}" >&2
  fi
}

ensure_conf() {
  local conf=/etc/containers/containers.conf
  local want
  want='[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"'
  if [[ -f "$conf" ]] && [[ "$(cat "$conf")" == "$want" ]]; then
    return 0
  fi
  if [[ -f "$conf" ]] && [[ ! -f "$conf.icepack-orig" ]]; then
    cp -p "$conf" "$conf.icepack-orig"
    log "saved previous $conf as $conf.icepack-orig"
  fi
  mkdir -p /etc/containers
  printf '%s\n' "$want" >"$conf"
  log "wrote $conf"
}

case "$CMD" in
  start)
    ensure_installed
    ensure_conf
    if ping_ok; then
      log "already serving on $SOCK"
    else
      if pid_alive; then
        log "stale service pid $(cat "$PIDFILE") does not answer; stopping it"
        kill "$(cat "$PIDFILE")" 2>/dev/null || true
        sleep 1
      fi
      rm -f "$SOCK" "$PIDFILE"
      log "starting podman system service on $SOCK (log: $LOGFILE)"
      # setsid: own session, so the service survives the calling shell and can be killed by pid
      setsid podman system service --time=0 "unix://$SOCK" >>"$LOGFILE" 2>&1 </dev/null &
      echo $! >"$PIDFILE"
      for _ in $(seq 1 150); do
        ping_ok && break
        if ! pid_alive; then
          log "podman service exited; last log lines:"; tail -20 "$LOGFILE" >&2; exit 1
        fi
        sleep 0.2
      done
      ping_ok || { log "no answer on $SOCK after 30 s"; tail -20 "$LOGFILE" >&2; exit 1; }
      log "ready (pid $(cat "$PIDFILE"))"
    fi
    echo "DOCKER_HOST=$DOCKER_HOST_VALUE"
    ;;
  status)
    if ping_ok; then
      log "running (pid $(cat "$PIDFILE" 2>/dev/null || echo '?')) on $SOCK"
      echo "DOCKER_HOST=$DOCKER_HOST_VALUE"
    else
      log "not running on $SOCK"; exit 1
    fi
    ;;
  stop)
    if pid_alive; then
      pid="$(cat "$PIDFILE")"
      log "stopping pid $pid"
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -0 "$pid" 2>/dev/null && { log "SIGKILL $pid"; kill -9 "$pid" 2>/dev/null || true; }
    else
      log "not running"
    fi
    rm -f "$PIDFILE" "$SOCK"
    ;;
  *) usage ;;
esac
