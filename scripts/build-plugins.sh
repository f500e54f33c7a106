#!/usr/bin/env bash
# Builds the non-Go example plugins from source (C, Rust, AssemblyScript, WAT).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "no non-Go plugins yet"
