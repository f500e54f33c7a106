#!/usr/bin/env bash
# Builds every Go example plugin (examples/plugins/*/go.mod) with the stock Go
# toolchain into its own folder, then writes its manifest plugin.json beside
# the .wasm from plugin.template.json.
#
# Neither the .wasm nor plugin.json of a Go example is committed: the manifest
# must carry the wasm's sha256 (the host refuses a manifest without one) and
# folder grants must be absolute paths, so both are written here:
#   "sha256": ""      becomes the digest of the freshly built .wasm
#   @PLUGIN_DIR@      becomes the example's absolute folder
#   @GRANTS_DIR@      becomes the absolute examples/grants: the folder beside
#                     the plugin folder under which the host grants folders by
#                     default (never inside the plugin folder: the host owns it)
# Folders a template grants under @GRANTS_DIR@ are created if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
grants=$(mkdir -p examples/grants && cd examples/grants && pwd)
for mod in examples/plugins/*/go.mod; do
  dir=$(dirname "$mod")
  name=$(basename "$dir")
  out="$dir/$name.wasm"
  # Rebuild only when a source file (Go, or an embedded file) is newer than the output.
  if [ ! -f "$out" ] || [ -n "$(find "$dir" pdk -type f \( -name '*.go' -o -name '*.json' -o -name go.mod \) ! -name plugin.json -newer "$out" -print -quit)" ]; then
    echo "build $out"
    # Build beside, then rename: a watching host never reads a half-written file.
    (cd "$dir" && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$name.wasm.tmp" . && mv "$name.wasm.tmp" "$name.wasm")
  fi
  tmpl="$dir/plugin.template.json"
  [ -f "$tmpl" ] || continue
  abs=$(cd "$dir" && pwd)
  sum=$(sha256sum "$out" | cut -d' ' -f1)
  manifest=$(sed -e "s|\"sha256\": *\"[0-9a-f]*\"|\"sha256\": \"$sum\"|" -e "s|@PLUGIN_DIR@|$abs|g" -e "s|@GRANTS_DIR@|$grants|g" "$tmpl")
  if [ ! -f "$dir/plugin.json" ] || [ "$manifest" != "$(cat "$dir/plugin.json")" ]; then
    printf '%s\n' "$manifest" > "$dir/plugin.json.tmp" && mv "$dir/plugin.json.tmp" "$dir/plugin.json"
  fi
  # Create the folders the manifest grants under the grants folder.
  { grep -o "\"path\": *\"$grants/[^\"]*\"" "$dir/plugin.json" || true; } | sed 's/.*"\(.*\)"$/\1/' | while read -r p; do
    mkdir -p "$p"
  done
done
