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
# Plugins build side by side, at most JOBS at a time (default: the CPUs).
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}

# stale: the plugin's .wasm is missing or older than a source file (Go, or
# an embedded file) of it or of pdk.
stale() {
  local dir=$1 out=$2
  [ ! -f "$out" ] || [ -n "$(find "$dir" pdk -type f \( -name '*.go' -o -name '*.json' -o -name go.mod \) ! -name plugin.json -newer "$out" -print -quit)" ]
}

# manifest writes the plugin's plugin.json from its template and creates
# the folders it grants under the grants folder.
manifest() {
  local dir=$1 name=$2 out=$3
  local tmpl="$dir/plugin.template.json"
  [ -f "$tmpl" ] || return 0
  local abs sum m
  abs=$(cd "$dir" && pwd)
  sum=$(sha256sum "$out" | cut -d' ' -f1)
  m=$(sed -e "s|\"sha256\": *\"[0-9a-f]*\"|\"sha256\": \"$sum\"|" -e "s|@PLUGIN_DIR@|$abs|g" -e "s|@GRANTS_DIR@|$grants|g" "$tmpl")
  if [ ! -f "$dir/plugin.json" ] || [ "$m" != "$(cat "$dir/plugin.json")" ]; then
    printf '%s\n' "$m" > "$dir/plugin.json.tmp" && mv "$dir/plugin.json.tmp" "$dir/plugin.json"
  fi
  { grep -o "\"path\": *\"$grants/[^\"]*\"" "$dir/plugin.json" || true; } | sed 's/.*"\(.*\)"$/\1/' | while read -r p; do
    mkdir -p "$p"
  done
}

todo=()
for mod in examples/plugins/*/go.mod; do
  dir=$(dirname "$mod")
  name=$(basename "$dir")
  if stale "$dir" "$dir/$name.wasm"; then todo+=("$dir"); fi
done

if [ ${#todo[@]} -gt 0 ]; then
  echo "building ${#todo[@]} Go plugin(s), $jobs at a time"
  logs=$(mktemp -d)
  trap 'rm -rf "$logs"' EXIT
  i=0 failed=0
  declare -A pids=()
  for dir in "${todo[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
    i=$((i + 1))
    name=$(basename "$dir")
    echo "build [$i/${#todo[@]}] $dir/$name.wasm"
    # Build beside, then rename: a watching host never reads a half-written file.
    (cd "$dir" && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$name.wasm.tmp" . && mv "$name.wasm.tmp" "$name.wasm") >"$logs/$name.log" 2>&1 &
    pids[$dir]=$!
  done
  for dir in "${todo[@]}"; do
    if ! wait "${pids[$dir]}"; then
      failed=1
      echo "build $dir failed:" >&2
      cat "$logs/$(basename "$dir").log" >&2
    fi
  done
  [ "$failed" = 0 ] || exit 1
fi

for mod in examples/plugins/*/go.mod; do
  dir=$(dirname "$mod")
  name=$(basename "$dir")
  manifest "$dir" "$name" "$dir/$name.wasm"
done
