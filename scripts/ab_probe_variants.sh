#!/usr/bin/env bash
# Interleaved A/B/C... of build variants over scripts/probe_ab_cases.py's records, in one call:
# every variant once per round, ROUNDS rounds, each run in its own process.
#   CPU machine:  FINEGEMM_EXTRA_NVCC_FLAGS=<flags> python3 scripts/probe_ab_cases.py --set S --precompile
#                 once per variant (FINEGEMM_CACHE_DIR=.fgcache), then carry .fgcache.
#   GPU machine:  VARIANTS="base= mb8=-DFINEGEMM_DIAG_L2_HINT_MAX_M_BLOCKS=8" \
#                 bash scripts/ab_probe_variants.sh --set mid --kinds fp8_dense bf16_dense
#                 -> $OUT/ab_<label>_<round>.json; python3 scripts/ab_summary.py $OUT/ab_*.json
set -uo pipefail
source "$(dirname "$0")/_env.sh"
source "$(dirname "$0")/_ab_rounds.sh"
ARGS=("$@")
run_once() {
  timeout 300 python3 scripts/probe_ab_cases.py --label "$LABEL" --num-tests "${FINEGEMM_BENCH_TESTS:-20}" \
    --out "$OUT/ab_${LABEL}_${ROUND}.json" "${ARGS[@]}" > "$OUT/ab_${LABEL}_${ROUND}.log" 2>&1
}
ab_rounds run_once
