#!/usr/bin/env bash
# Rebuilds the hostile .wasm fixtures from their .wat source (needs wabt's
# wat2wasm: apt-get install -y wabt). The .wasm files are committed so that
# the tests need no toolchain.
set -euo pipefail
cd "$(dirname "$0")"
for f in *.wat; do wat2wasm "$f" -o "${f%.wat}.wasm"; done
