#!/usr/bin/env bash
# Interleaved A/B/C... of build variants over one `finegemm bench` suite, in one call: every variant
# once per round, ROUNDS rounds, each in its own process (the variant's flags are part of the
# kernel cache key, so precompile each with FINEGEMM_EXTRA_NVCC_FLAGS=<flags> first).
#   VARIANTS="base= colorder=-DFINEGEMM_DIAG_1D1D_COLUMN_ORDER_SCALES" SUITE=grouped \
#     bash scripts/ab_bench_variants.sh --kinds wgrad k_grouped
#   -> $OUT/ab_<label>_<round>.json (the bench's JSON plus "label"); then
#      python3 scripts/ab_summary.py $OUT/ab_*.json
set -uo pipefail
source "$(dirname "$0")/_env.sh"
source "$(dirname "$0")/_ab_rounds.sh"
ARGS=("$@")
run_once() {
  local out="$OUT/ab_${LABEL}_${ROUND}.json"
  timeout 400 python3 -m finegemm bench "${SUITE:-grouped}" --num-tests "${FINEGEMM_BENCH_TESTS:-20}" \
    --out "$out" "${ARGS[@]}" > "${out%.json}.log" 2>&1 || return 1
  # ab_summary.py groups the files by label
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); d['label'] = sys.argv[2]; d['flags'] = sys.argv[3]; \
json.dump(d, open(sys.argv[1], 'w'), indent=1)" "$out" "$LABEL" "$FLAGS"
}
ab_rounds run_once
