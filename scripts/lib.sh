# shellcheck shell=bash
# Shared helpers for scripts/*. Sourcing it guarantees: ROOT (repo root),
# STATE_DIR (created; default $ROOT/.state), and small helpers for logging,
# Docker liveness, apt installs that never start services, stopping a
# daemon by PID, and a uv that runs (ensure_uv). It has no side effects beyond creating STATE_DIR.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE_DIR="${ENVLAYER_STATE_DIR:-$ROOT/.state}"
mkdir -p "$STATE_DIR"
DOCKERD_PID_FILE="$STATE_DIR/dockerd.pid"
DOCKERD_LOG="$STATE_DIR/dockerd.log"

log() { printf '[%s %s] %s\n' "$(basename "$0")" "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# True if a Docker daemon answers within 5 s.
docker_ok() { command -v docker >/dev/null 2>&1 && timeout 5 docker info >/dev/null 2>&1; }

# apt_install PKG...: install missing Debian packages as root. Runs
# `apt-get update` only if the first attempt fails (stale or empty lists).
# Recommends are installed (docker.io wants cgroupfs-mount; openssh-server
# brings the sftp-server). Maintainer scripts may not start services (policy-rc.d exit 101), so no
# system sshd or dockerd gets started behind our back.
apt_install() {
    [ "$(id -u)" = 0 ] || die "need root to apt-get install $*"
    command -v apt-get >/dev/null || die "no apt-get: install $* by hand"
    local policy=/usr/sbin/policy-rc.d made_policy=0 rc=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    log "apt-get install $*"
    if ! apt-get install -y -q "$@" </dev/null >"$STATE_DIR/apt.log" 2>&1; then
        log "install failed; running apt-get update and retrying (log: $STATE_DIR/apt.log)"
        { apt-get update -q && apt-get install -y -q "$@"; } \
            </dev/null >>"$STATE_DIR/apt.log" 2>&1 || rc=$?
    fi
    [ "$made_policy" = 1 ] && rm -f "$policy"
    if [ "$rc" != 0 ]; then tail -n 20 "$STATE_DIR/apt.log" >&2; die "apt-get install $* failed"; fi
}

# stop_pid PID NAME: SIGTERM, wait up to 20 s, then SIGKILL. Only signals
# the process if its command name is still NAME (guards against PID reuse).
stop_pid() {
    local pid="$1" name="$2" i
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || { log "pid $pid is not $name; not stopping it"; return 0; }
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
    log "$name (pid $pid) still running after 20 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

# ensure_uv: set UV=(...) to a uv that runs. The one on PATH if any; else the one in
# $ENVLAYER_UV_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/envlayer/uv, shared by every
# clone, so a fresh clone does not install it again), a venv of python3 into which pip
# installs uv from PyPI the first time, under a lock (two runs at once: one installs, the
# other waits and uses it). A venv, because Debian's own python3 refuses
# `pip install` outside one (PEP 668); as root, python3-venv is installed with apt when
# python3 lacks the venv module (a plain Debian python3 does).
ensure_uv() {
    if command -v uv >/dev/null 2>&1 && uv --version >/dev/null 2>&1; then
        UV=(uv)
        return 0
    fi
    local dir="${ENVLAYER_UV_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/envlayer/uv}" py
    if ! "$dir/bin/uv" --version >/dev/null 2>&1; then
        mkdir -p "$(dirname "$dir")"
        exec 7>>"$dir.lock"
        flock 7
        if ! "$dir/bin/uv" --version >/dev/null 2>&1; then
            py="$(command -v python3)" || die "no python3 on PATH: apt-get install python3 (3.11 or newer)"
            "$py" -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
            log "uv is not on PATH; installing it into $dir (a venv of $py)"
            rm -rf "$dir"
            "$py" -m venv "$dir" || die "$py -m venv $dir failed"
            "$dir/bin/pip" install --quiet uv || die "pip could not install uv into $dir (is PyPI reachable?)"
        fi
        exec 7>&-
    fi
    UV=("$dir/bin/uv")
}
