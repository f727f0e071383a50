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
: "${VARIANTS:?set VARIANTS to label=flags pairs, e.g. 'base= foo=-DFOO'}"
status=0
for round in $(seq 1 "${ROUNDS:-2}"); do
  for v in $VARIANTS; do
    label="${v%%=*}"; flags="${v#*=}"
    echo "== round $round $label: FINEGEMM_EXTRA_NVCC_FLAGS='$flags'"
    # shellcheck disable=SC2068
    FINEGEMM_EXTRA_NVCC_FLAGS="$flags" timeout 300 python3 scripts/probe_ab_cases.py --label "$label" \
      --num-tests "${FINEGEMM_BENCH_TESTS:-20}" --out "$OUT/ab_${label}_${round}.json" $@ > "$OUT/ab_${label}_${round}.log" 2>&1
    status=$(( status | $? ))
  done
done
exit $status
