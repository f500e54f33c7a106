#!/usr/bin/env bash
# Builds every Go example plugin (examples/plugins/*/go.mod) with the stock Go
# toolchain into its own folder, next to its manifest.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
for mod in examples/plugins/*/go.mod; do
  dir=$(dirname "$mod")
  name=$(basename "$dir")
  out="$dir/$name.wasm"
  # Rebuild only when a source file is newer than the output.
  if [ -f "$out" ] && [ -z "$(find "$dir" pdk -name '*.go' -newer "$out" -print -quit)" ]; then
    continue
  fi
  echo "build $out"
  (cd "$dir" && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$name.wasm" .)
done
