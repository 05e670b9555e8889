#!/usr/bin/env bash
# A real Kubernetes v1.20.2 control plane on 127.0.0.1, for kerf's end-to-end tests.
#
#   cluster.sh up DIR      start etcd, kube-apiserver, kube-scheduler, kube-controller-manager; writes
#                          DIR/kubeconfig (admin, system:masters) and DIR/env; waits for readiness.
#                          Idempotent: a healthy cluster in DIR is left as it is.
#   cluster.sh down DIR    stop every process recorded in DIR (by PID, TERM then KILL) and wait for it.
#                          Idempotent. Keeps DIR (logs); KERF_E2E_CLEAN=1 also removes the state.
#   cluster.sh env DIR     print `export ...` lines for the cluster in DIR.
#   cluster.sh status DIR  exit 0 when every process is alive and the apiserver is ready.
#
# Binaries: ~/.cache/kerf/k8s-1.20.2/bin (build-control-plane.sh; override with KERF_K8S_BIN), etcd from
# Debian's etcd-server (override with KERF_ETCD). Logs: DIR/logs/*.log. PIDs: DIR/pids/*.pid.
# With KERF_E2E_OWNER_PID=N, `up` also starts a watchdog that runs `down` when process N exits, so a
# test process that is killed outright (no destructor runs) leaves nothing behind.
# Nothing listens on a non-loopback address: every component binds 127.0.0.1 on a free port, and the
# scheduler and controller manager run with --port=0 (no insecure port).
set -euo pipefail

SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
CACHE="${KERF_CACHE:-$HOME/.cache/kerf}"
K8S_BIN="${KERF_K8S_BIN:-$CACHE/k8s-1.20.2/bin}"
ETCD="${KERF_ETCD:-$(command -v etcd || echo /usr/bin/etcd)}"
KUBECTL="${KUBECTL:-kubectl}"
# Components in start order; `down` stops them in reverse.
COMPONENTS=(etcd kube-apiserver kube-scheduler kube-controller-manager)
SERVICE_CIDR="10.0.0.0/24"

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] FATAL: %s\n' "$*" >&2; exit 1; }

usage() {
  echo "usage: $0 up|down|env|status DIR" >&2
  exit 2
}

[ $# -eq 2 ] || usage
CMD="$1"
DIR="$2"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
PKI="$DIR/pki"
PIDS="$DIR/pids"
LOGS="$DIR/logs"

# ---------------------------------------------------------------------------------------------------
# process bookkeeping

# pid_of NAME: the recorded PID when that process is still alive and is ours (its command line names
# DIR, so a recycled PID is never signalled), else nothing.
pid_of() {
  local f="$PIDS/$1.pid" pid
  [ -f "$f" ] || return 0
  pid="$(cat "$f")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  [ -r "/proc/$pid/cmdline" ] || return 0
  # a zombie is as good as gone
  if [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ]; then return 0; fi
  if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$DIR"; then
    echo "$pid"
  fi
}

stop_one() {
  local name="$1" pid i
  pid="$(pid_of "$name")"
  if [ -n "$pid" ]; then
    # every process was started by setsid, so it leads its own process group: signal the group
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    # wait up to 15 s for it to exit, then KILL and wait up to 5 s more
    for i in $(seq 1 150); do
      [ -n "$(pid_of "$name")" ] || break
      sleep 0.1
    done
    if [ -n "$(pid_of "$name")" ]; then
      log "$name ($pid) did not exit on TERM; killing"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
      for i in $(seq 1 50); do
        [ -n "$(pid_of "$name")" ] || break
        sleep 0.1
      done
    fi
    [ -z "$(pid_of "$name")" ] || die "$name ($pid) is still running"
  fi
  rm -f "$PIDS/$name.pid"
}

down() {
  local i
  if [ "${KERF_CLUSTER_WATCHDOG:-0}" != 1 ]; then
    stop_one watchdog
  else
    rm -f "$PIDS/watchdog.pid" # the watchdog itself is running this and exits right after
  fi
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    stop_one "${COMPONENTS[$i]}"
  done
  if [ "${KERF_E2E_CLEAN:-0}" = 1 ]; then
    rm -rf "$DIR/etcd" "$PKI" "$DIR"/*.kubeconfig "$DIR/kubeconfig" "$DIR/env" "$DIR/tokens.csv"
  fi
}

# start NAME CMD...: runs CMD in its own session, detached from our stdin/stdout/stderr (a caller that
# captures this script's output must not wait for the cluster), logging to DIR/logs/NAME.log.
start() {
  local name="$1"
  shift
  setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1 &
  echo $! >"$PIDS/$name.pid"
}

fail_up() {
  local name
  log "start-up failed: $1"
  for name in "${COMPONENTS[@]}"; do
    if [ -f "$LOGS/$name.log" ]; then
      echo "----- last lines of $LOGS/$name.log -----" >&2
      tail -n 15 "$LOGS/$name.log" >&2
    fi
  done
  down
  exit 1
}

# wait_until NAME SECONDS CMD...: polls CMD every 0.2 s until it succeeds; fails when the deadline
# passes or when the process NAME has died.
wait_until() {
  local name="$1" secs="$2" deadline
  shift 2
  deadline=$(($(date +%s) + secs))
  until "$@" >/dev/null 2>&1; do
    if [ -z "$(pid_of "$name")" ]; then fail_up "$name exited"; fi
    if [ "$(date +%s)" -ge "$deadline" ]; then fail_up "$name: not ready after ${secs}s ($*)"; fi
    sleep 0.2
  done
}

# A port free now, below the kernel's ephemeral range: a port from that range (what binding port 0 gives) can be
# taken as the source port of some outgoing connection between the pick and the component's bind, and the
# component then fails with "address already in use".
free_port() {
  local low=32768 p
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
  [ "$low" -gt 12000 ] || low=32768
  while :; do
    p=$((10000 + RANDOM % (low - 10000)))
    if command -v python3 >/dev/null 2>&1; then
      python3 -c 'import socket,sys;s=socket.socket();s.bind(("127.0.0.1",int(sys.argv[1])))' "$p" 2>/dev/null \
        && { echo "$p"; return; }
    else
      (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
    fi
  done
}

# ---------------------------------------------------------------------------------------------------
# certificates, tokens, kubeconfigs

gen_pki() {
  mkdir -p "$PKI"
  chmod 700 "$PKI"
  [ -s "$PKI/ca.crt" ] && [ -s "$PKI/apiserver.crt" ] && [ -s "$PKI/front-proxy-client.crt" ] && [ -s "$PKI/sa.pub" ] && return 0
  (
    cd "$PKI"
    openssl genrsa -out ca.key 2048 2>/dev/null
    openssl req -x509 -new -nodes -key ca.key -sha256 -days 3650 -subj "/CN=kerf-e2e-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -out ca.crt 2>/dev/null
    openssl genrsa -out apiserver.key 2048 2>/dev/null
    openssl req -new -key apiserver.key -subj "/CN=kube-apiserver" -out apiserver.csr 2>/dev/null
    cat >apiserver.ext <<EOF
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EOF
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days 3650 \
      -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    # front-proxy (request-header) CA and client: the scheduler's and controller manager's delegated
    # authentication read this CA from kube-system/extension-apiserver-authentication
    openssl genrsa -out front-proxy-ca.key 2048 2>/dev/null
    openssl req -x509 -new -nodes -key front-proxy-ca.key -sha256 -days 3650 -subj "/CN=kerf-e2e-front-proxy-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -out front-proxy-ca.crt 2>/dev/null
    openssl genrsa -out front-proxy-client.key 2048 2>/dev/null
    openssl req -new -key front-proxy-client.key -subj "/CN=front-proxy-client" -out front-proxy-client.csr 2>/dev/null
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' \
      >front-proxy-client.ext
    openssl x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key -CAcreateserial \
      -sha256 -days 3650 -extfile front-proxy-client.ext -out front-proxy-client.crt 2>/dev/null
    # service-account token signing key pair
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  ) || die "openssl failed"
  if ! [ -s "$PKI/apiserver.crt" ] || ! [ -s "$PKI/front-proxy-client.crt" ] || ! [ -s "$PKI/sa.pub" ]; then
    die "certificates were not generated"
  fi
}

gen_tokens() {
  [ -f "$DIR/tokens.csv" ] && return 0
  local admin sched cm
  admin="$(openssl rand -hex 24)"
  sched="$(openssl rand -hex 24)"
  cm="$(openssl rand -hex 24)"
  umask 077
  cat >"$DIR/tokens.csv" <<EOF
$admin,kerf-e2e-admin,kerf-e2e-admin,"system:masters"
$sched,system:kube-scheduler,system:kube-scheduler
$cm,system:kube-controller-manager,system:kube-controller-manager
EOF
}

token_of() { awk -F, -v u="$1" '$2 == u {print $1}' "$DIR/tokens.csv"; }

write_kubeconfig() { # FILE USER
  local file="$1" user="$2" ca
  ca="$(base64 -w0 <"$PKI/ca.crt")"
  umask 077
  cat >"$file.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kerf-e2e
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $ca
users:
- name: $user
  user:
    token: $(token_of "$user")
contexts:
- name: kerf-e2e
  context:
    cluster: kerf-e2e
    user: $user
    namespace: default
current-context: kerf-e2e
EOF
  mv "$file.tmp" "$file"
}

# ---------------------------------------------------------------------------------------------------
# readiness probes

etcd_healthy() { curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }
apiserver_ready() {
  curl -fsS --max-time 2 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $(token_of kerf-e2e-admin)" \
    "https://127.0.0.1:$APISERVER_PORT/readyz" | grep -qx ok
}
component_healthy() { curl -fsSk --max-time 2 "https://127.0.0.1:$1/healthz" | grep -qx ok; }
kubectl_ns_default() { "$KUBECTL" --kubeconfig "$DIR/kubeconfig" --request-timeout=5s get ns default; }
# In 1.20 a pod cannot be created before its namespace's default ServiceAccount has a token secret.
default_sa_ready() {
  [ -n "$("$KUBECTL" --kubeconfig "$DIR/kubeconfig" --request-timeout=5s -n default get serviceaccount default \
    -o 'jsonpath={.secrets[0].name}')" ]
}

load_ports() {
  [ -f "$DIR/ports" ] || return 1
  # shellcheck disable=SC1091
  . "$DIR/ports"
}

all_alive() {
  local name
  for name in "${COMPONENTS[@]}"; do
    [ -n "$(pid_of "$name")" ] || return 1
  done
}

status() {
  load_ports && all_alive && apiserver_ready
}

print_env() {
  load_ports || die "no cluster state in $DIR"
  cat <<EOF
export KUBECONFIG='$DIR/kubeconfig'
export KERF_E2E_CLUSTER='$DIR'
export KERF_E2E_APISERVER='https://127.0.0.1:$APISERVER_PORT'
EOF
}

# ---------------------------------------------------------------------------------------------------

up() {
  local b start_ts
  for b in kube-apiserver kube-scheduler kube-controller-manager; do
    [ -x "$K8S_BIN/$b" ] || die "$K8S_BIN/$b is missing: run e2e/scripts/build-control-plane.sh"
  done
  [ -x "$ETCD" ] || die "etcd is missing ($ETCD): apt-get install etcd-server (build-control-plane.sh does)"
  for b in openssl curl setsid "$KUBECTL"; do
    command -v "$b" >/dev/null || die "$b is required"
  done

  if status 2>/dev/null; then
    log "already up in $DIR"
    print_env
    return 0
  fi
  # half-started or stale: clean slate for the processes (state and logs stay)
  down
  mkdir -p "$PIDS" "$LOGS" "$DIR/etcd"
  start_ts=$(date +%s)

  ETCD_PORT="$(free_port)"
  ETCD_PEER_PORT="$(free_port)"
  APISERVER_PORT="$(free_port)"
  SCHEDULER_PORT="$(free_port)"
  CM_PORT="$(free_port)"
  cat >"$DIR/ports" <<EOF
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
APISERVER_PORT=$APISERVER_PORT
SCHEDULER_PORT=$SCHEDULER_PORT
CM_PORT=$CM_PORT
EOF
  gen_pki
  gen_tokens
  write_kubeconfig "$DIR/kubeconfig" kerf-e2e-admin
  write_kubeconfig "$DIR/scheduler.kubeconfig" system:kube-scheduler
  write_kubeconfig "$DIR/controller-manager.kubeconfig" system:kube-controller-manager

  # etcd's data dir is kept across restarts of the same DIR; a new cluster name per DIR
  start etcd "$ETCD" --name kerf-e2e --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "kerf-e2e=http://127.0.0.1:$ETCD_PEER_PORT" \
    --logger zap --log-outputs stderr
  wait_until etcd 30 etcd_healthy

  start kube-apiserver "$K8S_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --secure-port "$APISERVER_PORT" --insecure-port 0 \
    --advertise-address 127.0.0.1 --endpoint-reconciler-type none \
    --cert-dir "$PKI" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --token-auth-file "$DIR/tokens.csv" --anonymous-auth=false \
    --authorization-mode RBAC \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --allow-privileged=true --profiling=false --v=1
  wait_until kube-apiserver 90 apiserver_ready
  wait_until kube-apiserver 30 kubectl_ns_default

  start kube-scheduler "$K8S_BIN/kube-scheduler" \
    --kubeconfig "$DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig "$DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig "$DIR/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" --port 0 \
    --cert-dir "$DIR/scheduler-certs" \
    --leader-elect=false --profiling=false --v=1
  start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
    --kubeconfig "$DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$DIR/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$CM_PORT" --port 0 \
    --cert-dir "$DIR/controller-manager-certs" \
    --controllers '*,-nodeipam' \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --use-service-account-credentials=true \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --leader-elect=false --profiling=false --v=1
  wait_until kube-scheduler 60 component_healthy "$SCHEDULER_PORT"
  wait_until kube-controller-manager 60 component_healthy "$CM_PORT"
  wait_until kube-controller-manager 60 default_sa_ready

  if [ -n "${KERF_E2E_OWNER_PID:-}" ]; then
    [[ "$KERF_E2E_OWNER_PID" =~ ^[0-9]+$ ]] || die "KERF_E2E_OWNER_PID must be a PID"
    # The watchdog's command line names DIR (so pid_of recognises it); it polls the owner once a second.
    # shellcheck disable=SC2016 # expanded by the watchdog's shell
    start watchdog env KERF_CLUSTER_WATCHDOG=1 bash -c \
      'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec bash "$2" down "$3"' \
      kerf-e2e-watchdog "$KERF_E2E_OWNER_PID" "$SELF" "$DIR"
  fi
  log "up in $(($(date +%s) - start_ts))s: apiserver https://127.0.0.1:$APISERVER_PORT, kubeconfig $DIR/kubeconfig"
  print_env
}

case "$CMD" in
  up) up ;;
  down) down; log "down: $DIR" ;;
  env) print_env ;;
  status) status ;;
  *) usage ;;
esac
