#!/usr/bin/env bash
# The AWS API emulator of the e2e suite: moto 5.2.5 (PyPI, pinned by aws-emu/constraints.txt) run through
# aws-emu/moto_emu.py, which adds capacity/API fault injection (`/_emu/faults`) and seeds the EKS SSM
# parameters that moto lacks (aws-emu/ssm-seed.json, pointing at the AMIs of aws-emu/amis.json); `start` also
# creates the IAM role `KarpenterNodeRole` the tests' EC2NodeClasses name.
#
#   aws-emu.sh install        creates the venv under $KERF_CACHE/aws-emu (~30 s once; idempotent)
#   aws-emu.sh start DIR      starts a server on a free 127.0.0.1 port with its state in DIR (pid, port,
#                             server.log), waits until it answers EC2 calls (deadline), prints `export` lines
#   aws-emu.sh stop DIR       stops the server started in DIR, by its PID
#
# With KERF_E2E_OWNER_PID=N, `start` also runs a watchdog that stops the server when process N exits, so a
# test process killed outright leaves nothing behind. Environment: KERF_CACHE (default ~/.cache/kerf),
# KERF_PYTHON (default python3), AWS_EMU_START_TIMEOUT (seconds, default 60).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FILES="$HERE/aws-emu"
SELF="$HERE/aws-emu.sh"
CACHE="${KERF_CACHE:-$HOME/.cache/kerf}"
VENV="$CACHE/aws-emu/venv"
PY="${KERF_PYTHON:-python3}"
MOTO_VERSION="5.2.5"

log() { printf '[aws-emu] %s\n' "$*" >&2; }
die() { printf '[aws-emu] FATAL: %s\n' "$*" >&2; exit 1; }

installed() {
  [ -x "$VENV/bin/python" ] &&
    [ "$("$VENV/bin/python" -c 'import moto; print(moto.__version__)' 2>/dev/null)" = "$MOTO_VERSION" ]
}

install() {
  if installed; then
    log "cached: moto $MOTO_VERSION in $VENV"
    return
  fi
  command -v "$PY" >/dev/null || die "$PY not found"
  "$PY" -c 'import venv, ensurepip' 2>/dev/null || die "$PY lacks venv/ensurepip (Debian: apt-get install python3-venv)"
  log "installing moto $MOTO_VERSION into $VENV"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV" >&2
  # Only the EC2/SQS/SSM extras and the two server dependencies (~140 MB), every version pinned.
  "$VENV/bin/pip" install -q --disable-pip-version-check -c "$FILES/constraints.txt" \
    "moto[ec2,sqs,ssm]==$MOTO_VERSION" flask flask-cors >&2
  installed || die "moto $MOTO_VERSION did not install into $VENV"
}

free_port() {
  "$VENV/bin/python" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'
}

pid_alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

start() {
  local dir="$1"
  installed || install
  mkdir -p "$dir"
  [ -f "$dir/server.pid" ] && pid_alive "$(cat "$dir/server.pid")" && die "a server already runs for $dir"
  local port
  port="$(free_port)"
  # Validation makes moto refuse unknown instance types and AMIs as EC2 does; the AMI list is ours.
  MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION=true MOTO_ENABLE_AMI_VALIDATION=true \
    MOTO_AMIS_PATH="$FILES/amis.json" \
    setsid "$VENV/bin/python" "$FILES/moto_emu.py" -H 127.0.0.1 -p "$port" \
    --ssm-seed "$FILES/ssm-seed.json" </dev/null >"$dir/server.log" 2>&1 &
  echo $! >"$dir/server.pid"
  echo "$port" >"$dir/server.port"
  if [ -n "${KERF_E2E_OWNER_PID:-}" ]; then
    [[ "$KERF_E2E_OWNER_PID" =~ ^[0-9]+$ ]] || die "KERF_E2E_OWNER_PID must be a PID"
    # shellcheck disable=SC2016 # expanded by the watchdog's shell
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; AWS_EMU_WATCHDOG=1 exec bash "$2" stop "$3"' \
      aws-emu-watchdog "$KERF_E2E_OWNER_PID" "$SELF" "$dir" </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/watchdog.pid"
  fi
  # Ready once an EC2 call answers; that first call also loads moto's instance-type data (~2 s).
  if ! "$VENV/bin/python" - "$port" "${AWS_EMU_START_TIMEOUT:-60}" "$(cat "$dir/server.pid")" <<'PYEOF'
import os, sys, time, urllib.parse, urllib.request
port, timeout, pid = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
deadline = time.time() + timeout
request = urllib.request.Request(
    f"http://127.0.0.1:{port}/", method="POST",
    data=b"Action=DescribeAvailabilityZones&Version=2016-11-15",
    headers={"Content-Type": "application/x-www-form-urlencoded",
             "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20240101/us-west-2/ec2/aws4_request, "
                              "SignedHeaders=host, Signature=0"})
while True:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("the server exited during start-up")
    try:
        urllib.request.urlopen(request, timeout=10).read()
        break
    except Exception as e:
        if time.time() > deadline:
            sys.exit(f"no answer within {timeout:.0f} s: {e}")
        time.sleep(0.2)
# The node role the tests' EC2NodeClasses name (`role: KarpenterNodeRole`): kerf makes an instance profile for it.
policy = '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}'
urllib.request.urlopen(urllib.request.Request(
    f"http://127.0.0.1:{port}/", method="POST",
    data=urllib.parse.urlencode({"Action": "CreateRole", "Version": "2010-05-08", "RoleName": "KarpenterNodeRole",
                                 "AssumeRolePolicyDocument": policy}).encode(),
    headers={"Content-Type": "application/x-www-form-urlencoded",
             "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20240101/us-east-1/iam/aws4_request, "
                              "SignedHeaders=host, Signature=0"}), timeout=10).read()
PYEOF
  then
    tail -n 20 "$dir/server.log" >&2 || true
    stop "$dir"
    die "the server on port $port did not become ready (log: $dir/server.log)"
  fi
  log "ready on http://127.0.0.1:$port (pid $(cat "$dir/server.pid"))"
  cat <<ENV
export AWS_ENDPOINT_URL=http://127.0.0.1:$port
export AWS_ACCESS_KEY_ID=testing
export AWS_SECRET_ACCESS_KEY=testing
export AWS_REGION=us-west-2
export AWS_EC2_METADATA_DISABLED=true
export AWS_EMU_PID=$(cat "$dir/server.pid")
ENV
}

stop_pid_file() {
  local file="$1" pid
  [ -f "$file" ] || return 0
  pid="$(cat "$file")"
  if pid_alive "$pid"; then
    # started by setsid: the process leads its own group
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do pid_alive "$pid" || break; sleep 0.1; done
    pid_alive "$pid" && { kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; }
  fi
  rm -f "$file"
}

stop() {
  local dir="$1"
  # The watchdog runs `stop` itself when the owner exits; it must not kill itself first.
  if [ "${AWS_EMU_WATCHDOG:-0}" = 1 ]; then rm -f "$dir/watchdog.pid"; else stop_pid_file "$dir/watchdog.pid"; fi
  stop_pid_file "$dir/server.pid"
}

case "${1:-}" in
  install) install ;;
  start) [ $# -eq 2 ] || die "usage: $0 start DIR"; start "$2" ;;
  stop) [ $# -eq 2 ] || die "usage: $0 stop DIR"; stop "$2" ;;
  *) die "usage: $0 install | start DIR | stop DIR" ;;
esac
