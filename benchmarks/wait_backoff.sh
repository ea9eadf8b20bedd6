#!/usr/bin/env bash
# Compare the sleep between a waiting program's polls (SYNCOPY_WAIT_BACKOFF_NS, read at import: one
# process per value) on the loopback world's core cases (gpu_bench.py --core: sequential, the
# graph-replayed stream-level baseline and fused, each in the same process).
#   bash benchmarks/wait_backoff.sh RESULTS_DIR [NS ...]      (default: 0 256 1024)
# Extra gpu_bench.py arguments go in $BENCH_ARGS (e.g. "--patterns ag_gemm,gemm_rs --chunks 4");
# $SYNCOPY_LOOPBACK_FLAGS=own-stream compares the flags on their own stream too.
set -uo pipefail
OUT="${1:-results}"; shift || true
VALUES="${*:-0 256 1024}"
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
source benchmarks/gpu_env.sh
tag="${SYNCOPY_LOOPBACK_FLAGS:-own-stream}"  # the loopback default (see LoopbackWorld flags=)
for ns in $VALUES; do
  echo "== SYNCOPY_WAIT_BACKOFF_NS=$ns flags=$tag ${BENCH_ARGS:-}"
  SYNCOPY_WAIT_BACKOFF_NS="$ns" timeout "${STEP_TIMEOUT_S:-90}" python3 benchmarks/gpu_bench.py --core ${BENCH_ARGS:-} \
    --json "$OUT/backoff_${ns}_${tag}.json" 2>&1 | tee "$OUT/backoff_${ns}_${tag}.txt"
done
