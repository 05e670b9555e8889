#!/usr/bin/env bash
# Builds kube-apiserver, kube-scheduler and kube-controller-manager v1.20.2 from Debian bookworm's
# `kubernetes` source package and caches them under ~/.cache/kerf/k8s-1.20.2/bin. Also installs etcd
# (Debian's etcd-server). Idempotent: when the three binaries are cached it only checks them.
#
# The recipe (docs/testing.md, docs/reference/test-cluster.md): Debian's Go is 1.19, Kubernetes 1.20
# was built with Go 1.15, so two vendored libraries need fixing before the build:
#   1. reflect2 v1.0.1 corrupts memory under Go >= 1.18 -> replace with reflect2 1.0.2 (Debian package).
#   2. the OpenAPI type validator treats "" as null under Go >= 1.16 (kubernetes#99804) -> nil check only.
# Each fix is verified; the script fails loudly when one did not apply.
#
# Usage: build-control-plane.sh [--prepare-only]   (--prepare-only: fetch, unpack and fix the source, no build)
# Environment: KERF_CACHE (default ~/.cache/kerf), KERF_KEEP_BUILD=1 keeps the source tree and Go cache.
set -euo pipefail

PREPARE_ONLY=0
case "${1:-}" in
  --prepare-only) PREPARE_ONLY=1 ;;
  "") ;;
  *) echo "usage: $0 [--prepare-only]" >&2; exit 2 ;;
esac

CACHE="${KERF_CACHE:-$HOME/.cache/kerf}"
K8S_DIR="$CACHE/k8s-1.20.2"
BIN="$K8S_DIR/bin"
BINARIES=(kube-apiserver kube-scheduler kube-controller-manager)

log() { printf '[build-control-plane] %s\n' "$*" >&2; }
die() { printf '[build-control-plane] FATAL: %s\n' "$*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# --- etcd and the other runtime packages are needed even when the binaries are cached ------------
ensure_runtime_packages() {
  local need=()
  command -v etcd >/dev/null || [ -x /usr/bin/etcd ] || need+=(etcd-server)
  command -v openssl >/dev/null || need+=(openssl)
  command -v curl >/dev/null || need+=(curl)
  if [ "${#need[@]}" -gt 0 ]; then
    log "installing ${need[*]}"
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
  fi
}

have_binaries() {
  local b
  for b in "${BINARIES[@]}"; do
    [ -x "$BIN/$b" ] || return 1
  done
}

check_binaries() {
  local b out
  for b in "${BINARIES[@]}"; do
    out="$("$BIN/$b" --version 2>&1)" || die "$BIN/$b --version failed: $out"
    case "$out" in
      *v1.20.2*) log "$b: $out" ;;
      *) die "$BIN/$b reports an unexpected version: $out" ;;
    esac
  done
}

ensure_runtime_packages
if [ "$PREPARE_ONLY" = 0 ] && have_binaries; then
  log "cached binaries found in $BIN"
  check_binaries
  exit 0
fi

# --- 1. deb-src entry and build packages -----------------------------------------------------------
SRC_LIST=/etc/apt/sources.list.d/kerf-bookworm-src.sources
if ! grep -qs 'deb-src' "$SRC_LIST"; then
  log "adding $SRC_LIST"
  as_root tee "$SRC_LIST" >/dev/null <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  as_root apt-get update -q
fi
need=()
for p in golang-go rsync etcd-server golang-github-modern-go-reflect2-dev make dpkg-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
  log "installing ${need[*]}"
  if ! apt-cache showsrc kubernetes >/dev/null 2>&1; then as_root apt-get update -q; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi
command -v go >/dev/null || die "go not found after installing golang-go"
log "$(go version)"

# --- 2. source package ---------------------------------------------------------------------------
DL="$K8S_DIR/download"
mkdir -p "$DL"
if ! ls "$DL"/kubernetes_*.orig.tar.* >/dev/null 2>&1; then
  log "fetching the kubernetes source package"
  apt-cache showsrc kubernetes >/dev/null 2>&1 || as_root apt-get update -q
  (cd "$DL" && apt-get source --download-only kubernetes) || die "apt-get source --download-only kubernetes failed"
fi
ORIG=""
for f in "$DL"/kubernetes_*.orig.tar.*; do
  case "$f" in *.asc) ;; *) [ -f "$f" ] && ORIG="$f" ;; esac
done
[ -n "$ORIG" ] || die "no orig tarball in $DL"
log "orig tarball: $ORIG"

GOPATH_DIR="$K8S_DIR/gopath"
TREE="$K8S_DIR/src"
rm -rf "$TREE"
mkdir -p "$TREE"
log "unpacking"
tar -xf "$ORIG" -C "$TREE" --strip-components=1
[ -d "$TREE/vendor" ] || die "the orig tarball has no vendor/ directory"

# --- 3a. reflect2 1.0.2 --------------------------------------------------------------------------
R2_NEW=/usr/share/gocode/src/github.com/modern-go/reflect2
R2_OLD="$TREE/vendor/github.com/modern-go/reflect2"
[ -d "$R2_NEW" ] || die "$R2_NEW missing (golang-github-modern-go-reflect2-dev)"
[ -d "$R2_OLD" ] || die "$R2_OLD missing from the vendor tree"
find "$R2_OLD" -maxdepth 1 -type f \( -name '*.go' -o -name '*.s' \) -delete
find "$R2_NEW" -maxdepth 1 -type f \( -name '*.go' -o -name '*.s' \) ! -name '*_test.go' -exec cp {} "$R2_OLD/" \;
# reflect2 1.0.2 is the version that resolves types with go:linkname to runtime.typelinks per Go
# version (go_above_118.go); 1.0.1 does not have that file.
[ -f "$R2_OLD/go_above_118.go" ] || die "reflect2 fix did NOT apply: $R2_OLD/go_above_118.go missing"
if ! cmp -s "$R2_NEW/reflect2.go" "$R2_OLD/reflect2.go"; then die "reflect2 fix did NOT apply (reflect2.go differs)"; fi
log "fix 1 applied: vendored reflect2 replaced from $R2_NEW ($(dpkg-query -W -f='${Version}' golang-github-modern-go-reflect2-dev))"

# --- 3b. nil-not-zero in both validate/type.go ---------------------------------------------------
TYPE_FILES=(
  "$TREE/vendor/github.com/go-openapi/validate/type.go"
  "$TREE/vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go"
)
for f in "${TYPE_FILES[@]}"; do
  [ -f "$f" ] || die "$f missing from the vendor tree"
  # The Go >= 1.16 bug: `data == nil || reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data))`
  # makes "" count as null. Keep only the nil test.
  before="$(sha256sum <"$f")"
  sed -i -E 's/if data == nil \|\| reflect\.DeepEqual\(reflect\.Zero\(reflect\.TypeOf\(data\)\), reflect\.ValueOf\(data\)\) \{/if data == nil {/' "$f"
  [ "$(sha256sum <"$f")" != "$before" ] || die "validate fix did NOT apply to $f (the expected null check was not found)"
  if grep -q 'reflect\.Zero' "$f"; then
    die "validate fix did NOT apply to $f (a zero-value check is still there)"
  fi
  [ "$(grep -c 'if data == nil {' "$f")" = 1 ] || die "validate fix did NOT apply to $f (expected one plain nil check)"
  # the file must still compile without an unused import
  if ! grep -q 'reflect\.' "$f"; then
    sed -i '/^[[:space:]]*"reflect"$/d' "$f"
  fi
done
log "fix 2 applied: validate/type.go null check tests only for nil (both copies)"
if [ "$PREPARE_ONLY" = 1 ]; then
  log "prepared (not built): $TREE"
  exit 0
fi

# --- 4. build --------------------------------------------------------------------------------------
mkdir -p "$GOPATH_DIR/src/k8s.io"
ln -sfn "$TREE" "$GOPATH_DIR/src/k8s.io/kubernetes"
export GOPATH="$GOPATH_DIR"
export GOCACHE="$K8S_DIR/go-build"
export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-}"
export KUBE_GIT_VERSION="v1.20.2"
export KUBE_GIT_TREE_STATE="clean"
export KUBE_GIT_COMMIT="faecb196815e248d3ecfb03c680a4507229c2a56"
export KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20
start=$(date +%s)
log "building ${BINARIES[*]} (nice -n 10, CGO_ENABLED=0); this takes about 9 minutes on 2 cores"
(cd "$GOPATH_DIR/src/k8s.io/kubernetes" &&
  nice -n 10 make WHAT="cmd/kube-apiserver cmd/kube-scheduler cmd/kube-controller-manager") \
  || die "make failed"
log "build took $(( $(date +%s) - start )) s"

mkdir -p "$BIN"
for b in "${BINARIES[@]}"; do
  out="$(find "$TREE/_output" -type f -name "$b" -perm -u+x | head -n1)"
  [ -n "$out" ] || die "built binary $b not found under $TREE/_output"
  install -m 0755 "$out" "$BIN/$b.tmp"
  mv "$BIN/$b.tmp" "$BIN/$b"
done
check_binaries

if [ "${KERF_KEEP_BUILD:-0}" != 1 ]; then
  log "removing the build tree and Go cache (set KERF_KEEP_BUILD=1 to keep them)"
  chmod -R u+w "$GOPATH_DIR" "$GOCACHE" 2>/dev/null || true
  rm -rf "$TREE" "$GOPATH_DIR" "$GOCACHE"
fi
log "done: $BIN"
