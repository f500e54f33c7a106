#!/usr/bin/env bash
# Runs the host next to the reference A2A server (a2a-go's a2asrv, in the
# same benchmark run) and prints each ratio against the performance goals:
# SendMessage at c=1 and c=8 (durable and in memory), streaming events/s,
# and what a real model's first text and whole answer gain through the
# durable host. Run it on a quiet machine; figures on a busy one say little.
#   scripts/bench-reference.sh [runs]     (default 2; the median ratio is printed)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-2}
make -s plugins-go
bin=$(mktemp -d)/host.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -o "$bin" ./host
out=$(mktemp)
cd host
for ((i = 1; i <= runs; i++)); do
	"$bin" -test.run '^$' -test.bench 'SendMessage/.*/c=(1|8)$' -test.benchtime 1500x | grep -a '^Benchmark' | sed "s/^/run$i /" >>"$out"
	"$bin" -test.run '^$' -test.bench 'StreamingEvents' -test.benchtime 30x | grep -a '^Benchmark' | sed "s/^/run$i /" >>"$out"
	"$bin" -test.run '^$' -test.bench 'RealModelOverhead/.*server-process' -test.benchtime 40x | grep -a '^Benchmark' | sed "s/^/run$i /" >>"$out"
done
cat "$out"
echo
awk '
# value(unit): the number before the unit on this line
function value(unit,   i) { for (i = 3; i <= NF; i++) if ($i == unit) return $(i-1); return "" }
function name(   n) { n = $2; sub(/^Benchmark/, "", n); sub(/-[0-9]+$/, "", n); return n }
{ r = $1; n = name() }
n ~ /^SendMessage\// { v[r, n] = value("req/s") }
n ~ /^StreamingEvents\// { v[r, n] = value("events/s") }
n ~ /^RealModelOverhead\// { first[r, n] = value("first-text-ms"); end[r, n] = value("end-ms") }
{ runs[r] = 1 }
function median(a, k,   i, j, t) {
	for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
}
function ratio(host, ref, goal, label,   k, r, a) {
	k = 0
	for (r in runs) if (v[r, ref] > 0) a[++k] = v[r, host] / v[r, ref]
	m = median(a, k)
	printf "%-44s %6.2fx   goal >= %.1fx  %s\n", label, m, goal, (m >= goal ? "met" : "NOT MET")
}
function added(kind, goal, label,   k, r, a) {
	k = 0
	for (r in runs) {
		if (kind == "first") a[++k] = first[r, "RealModelOverhead/looopy-server-process"] - first[r, "RealModelOverhead/direct-server-process"]
		else a[++k] = end[r, "RealModelOverhead/looopy-server-process"] - end[r, "RealModelOverhead/direct-server-process"]
	}
	m = median(a, k)
	printf "%-44s %+6.2f ms goal <= %d ms   %s\n", label, m, goal, (m <= goal ? "met" : "NOT MET")
}
END {
	print "median over runs, each ratio taken within one run:"
	ratio("SendMessage/looopy-mem/c=8", "SendMessage/a2asrv/c=8", 1.5, "SendMessage c=8, in memory / reference")
	ratio("SendMessage/looopy/c=8", "SendMessage/a2asrv/c=8", 1.0, "SendMessage c=8, durable / reference")
	ratio("SendMessage/looopy/c=1", "SendMessage/a2asrv/c=1", 0.5, "SendMessage c=1, durable / reference")
	ratio("StreamingEvents/looopy", "StreamingEvents/a2asrv", 1.0, "streaming events/s, durable / reference")
	added("first", 2, "real model, first text added (durable)")
	added("end", 5, "real model, whole answer added (durable)")
}' "$out"
rm -f "$out"
