#!/usr/bin/env bash
# Builds the release binaries (linux/amd64, linux/arm64, windows/amd64),
# cross-compiled without cgo, with a SHA256SUMS file beside them.
#   scripts/dist.sh [OUTDIR]        (default: dist)
# VERSION=v1.2.3 scripts/dist.sh    sets the version `slotpoller version` prints.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
mkdir -p "$out"
rm -f "$out"/slotpoller-* "$out"/SHA256SUMS
for target in linux/amd64 linux/arm64 windows/amd64; do
  os=${target%/*}
  arch=${target#*/}
  ext=""
  if [ "$os" = windows ]; then ext=.exe; fi
  echo "building $os/$arch"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "-s -w -X main.version=$version" \
    -o "$out/slotpoller-$os-$arch$ext" .
done
(cd "$out" && sha256sum slotpoller-* > SHA256SUMS && cat SHA256SUMS)
