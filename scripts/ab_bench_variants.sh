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
: "${VARIANTS:?set VARIANTS to label=flags pairs, e.g. 'base= foo=-DFOO'}"
status=0
for round in $(seq 1 "${ROUNDS:-2}"); do
  for v in $VARIANTS; do
    label="${v%%=*}"; flags="${v#*=}"
    out="$OUT/ab_${label}_${round}.json"
    echo "== round $round $label: FINEGEMM_EXTRA_NVCC_FLAGS='$flags'"
    # shellcheck disable=SC2068
    FINEGEMM_EXTRA_NVCC_FLAGS="$flags" timeout 400 python3 -m finegemm bench "${SUITE:-grouped}" \
      --num-tests "${FINEGEMM_BENCH_TESTS:-20}" --out "$out" $@ > "${out%.json}.log" 2>&1
    status=$(( status | $? ))
    python3 -c "import json, sys; d = json.load(open(sys.argv[1])); d['label'] = sys.argv[2]; d['flags'] = sys.argv[3]; \
json.dump(d, open(sys.argv[1], 'w'), indent=1)" "$out" "$label" "$flags" || status=1
  done
done
exit $status
