#!/usr/bin/env bash
# Builds the non-Go example plugins from source (C, Rust, AssemblyScript, WAT)
# into their folders, next to their manifests, then checks that each
# manifest's sha256 matches its .wasm.
#
# The builds are reproducible: the same Debian packages and the same npm lock
# give the same bytes, so CI rebuilds them and compares with the committed
# fixtures (make fixtures-check).
#
# Toolchains (what .ci/run installs):
#   C               clang-14, lld-14, wasi-libc, libclang-rt-14-dev-wasm32 (apt)
#   Rust            rustc, libstd-rust-dev-wasm32 (apt; Debian's /usr/bin/rustc)
#   AssemblyScript  nodejs + npm, then `npm ci` in each as-* folder
#   WAT             wabt (apt)
#
# Usage: scripts/build-plugins.sh [--update-manifests] [name...]
#   --update-manifests  write the new sha256 into plugin.json instead of failing
#   name...             build only these example folders (default: every one)
set -euo pipefail
cd "$(dirname "$0")/.."

update=0
only=()
for arg in "$@"; do
  case "$arg" in
  --update-manifests) update=1 ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
  -*)
    echo "build-plugins: unknown flag $arg" >&2
    exit 2
    ;;
  *) only+=("$arg") ;;
  esac
done

# Debian's rustc, not a rustup one that may come first in PATH: the bytes
# depend on the compiler's version.
RUSTC=${LOOOPY_RUSTC:-/usr/bin/rustc}
CLANG=${LOOOPY_CLANG:-clang-14}

die() {
  echo "build-plugins: $*" >&2
  exit 1
}

need_cmd() { # command, what to install
  command -v "$1" >/dev/null 2>&1 || die "$1 not found: install $2"
}

need_file() { # file, what to install
  [ -e "$1" ] || die "$1 not found: install $2"
}

build_c() { # dir name
  need_cmd "$CLANG" "the Debian package clang-14"
  need_cmd wasm-ld-14 "the Debian package lld-14"
  need_file /usr/lib/wasm32-wasi/libc.a "the Debian package wasi-libc"
  need_file /usr/lib/llvm-14/lib/clang/14.0.6/lib/wasi/libclang_rt.builtins-wasm32.a \
    "the Debian package libclang-rt-14-dev-wasm32"
  (
    cd "$1"
    # A WASI reactor: no main, _initialize runs the constructors.
    "$CLANG" --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor \
      -O2 -Wall -Wextra -Werror -ffile-prefix-map="$PWD"=. \
      -Wl,--strip-all -o "$2.wasm" ./*.c
  )
}

build_rust() { # dir name
  need_cmd "$RUSTC" "the Debian package rustc"
  need_file /usr/lib/rustlib/wasm32-unknown-unknown \
    "the Debian package libstd-rust-dev-wasm32"
  local src
  src=$(cd "$1" && ls ./*.rs | head -n 1)
  [ -n "$src" ] || die "$1: no .rs file"
  (
    cd "$1"
    # wasm32-unknown-unknown: no WASI, no imports but the host's. A 64 KiB
    # stack instead of the default 1 MiB keeps instances small.
    "$RUSTC" --edition=2021 --crate-type=cdylib --crate-name="${2//-/_}" \
      --target=wasm32-unknown-unknown \
      -C opt-level=s -C panic=abort -C debuginfo=0 -C strip=symbols \
      -C lto -C codegen-units=1 -C link-arg=-zstack-size=65536 \
      --remap-path-prefix="$PWD"=. \
      -o "$2.wasm" "$src"
  )
}

build_as() { # dir name
  need_cmd node "the Debian package nodejs (or Node.js 20+)"
  [ -x "$1/node_modules/.bin/asc" ] ||
    die "$1: AssemblyScript is not installed: run (cd $1 && npm ci)"
  # The exact command is the build script of the folder's package.json.
  (cd "$1" && npm run --silent build)
}

build_wat() { # dir name
  need_cmd wat2wasm "the Debian package wabt"
  local src
  src=$(cd "$1" && ls ./*.wat | head -n 1)
  [ -n "$src" ] || die "$1: no .wat file"
  (cd "$1" && wat2wasm "$src" -o "$2.wasm")
}

# check_manifest compares plugin.json's sha256 with the .wasm's.
check_manifest() { # dir name
  local manifest="$1/plugin.json" wasm="$1/$2.wasm" want got
  [ -f "$manifest" ] || die "$manifest is missing"
  grep -q "\"wasm\": *\"$2.wasm\"" "$manifest" || die "$manifest: \"wasm\" is not \"$2.wasm\""
  got=$(sha256sum "$wasm" | cut -d' ' -f1)
  want=$(sed -n 's/.*"sha256": *"\([0-9a-f]*\)".*/\1/p' "$manifest")
  if [ "$want" != "$got" ]; then
    if [ "$update" = 1 ]; then
      sed -i "s/\"sha256\": *\"[0-9a-f]*\"/\"sha256\": \"$got\"/" "$manifest"
      echo "  $manifest: sha256 updated"
    else
      die "$manifest: sha256 $want does not match $wasm ($got); rerun with --update-manifests if the change is intended"
    fi
  fi
}

built=0
for dir in examples/plugins/*/; do
  dir=${dir%/}
  name=$(basename "$dir")
  # Go examples (and Go test packages) belong to scripts/build-go-plugins.sh.
  [ -f "$dir/go.mod" ] && continue
  compgen -G "$dir/*.go" >/dev/null && continue
  if [ ${#only[@]} -gt 0 ]; then
    match=0
    for o in "${only[@]}"; do [ "$o" = "$name" ] && match=1; done
    [ "$match" = 1 ] || continue
  fi
  case "$name" in
  lib-*) continue ;; # sources shared by the examples of one language
  c-*) kind=c ;;
  rust-*) kind=rust ;;
  as-*) kind=as ;;
  wat-*) kind=wat ;;
  *) die "$dir: no go.mod and no known language prefix (c-, rust-, as-, wat-)" ;;
  esac
  echo "build $dir/$name.wasm ($kind)"
  "build_$kind" "$dir" "$name"
  check_manifest "$dir" "$name"
  built=$((built + 1))
done
if [ ${#only[@]} -gt 0 ] && [ "$built" -ne ${#only[@]} ]; then
  die "asked for ${only[*]}, built $built"
fi
echo "built $built non-Go plugins"
