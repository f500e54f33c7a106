#!/usr/bin/env bash
# The import directions of ARCHITECTURE.md: each package may import only what
# its row allows. Fails naming the package and the forbidden import.
set -euo pipefail
mod=$(go list -m)
fail=0
deny() { # package, regex of forbidden dependencies
  local bad
  bad=$(go list -deps "$1" 2>/dev/null | grep -E "$2" || true)
  if [ -n "$bad" ]; then
    echo "$1 must not import:"; echo "$bad" | sed 's/^/    /'; fail=1
  fi
}
ours="^$mod/(store|plugins|host|sse|artifacts|cmd)"
deny ./loop "gofiber|dgraph-io/badger|tetratelabs/wazero|extism|redis/go-redis|minio/minio-go|$ours"
deny ./pdk "gofiber|dgraph-io/badger|tetratelabs/wazero|extism/go-sdk|^$mod/(loop|store|plugins|host|sse|artifacts)"
deny ./store/... "gofiber|tetratelabs/wazero|extism|minio/minio-go|^$mod/(plugins|host|sse|artifacts)"
# The Redis backend stands beside Badger: it needs neither Badger nor the Badger store.
deny ./store/redisstore/... "dgraph-io/badger|^$mod/store$"
deny ./sse/... "gofiber|dgraph-io/badger|redis/go-redis|minio/minio-go|tetratelabs/wazero|extism|^$mod/(store|plugins|host|artifacts)"
deny ./plugins/... "gofiber|dgraph-io/badger|^$mod/(store|host|sse|artifacts)"
deny ./host/taskrt "gofiber|dgraph-io/badger|redis/go-redis|minio/minio-go|tetratelabs/wazero|extism|a2aproject|^$mod/(store|plugins|sse|artifacts|cmd)|^$mod/host$"
deny ./artifacts/... "gofiber|tetratelabs/wazero|extism|redis/go-redis|^$mod/(plugins|host|sse)"
# The S3 client stays in its own package: the artifact store itself names no engine.
deny ./artifacts "minio/minio-go"
deny ./host/mcp/... "gofiber|dgraph-io/badger|tetratelabs/wazero|extism|redis/go-redis|minio/minio-go|^$mod/(store|plugins|host$|host/cli|sse|artifacts|cmd)"
deny ./host/cli/... "^$mod/cmd"
# The terminal chat is an A2A client: nothing of the server in it.
deny ./host/chat/... "gofiber|dgraph-io/badger|tetratelabs/wazero|extism|redis/go-redis|minio/minio-go|^$mod/(loop|store|plugins|host$|host/cli|host/taskrt|sse|artifacts|cmd)"
exit $fail
