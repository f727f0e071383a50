#!/usr/bin/env bash
# Same-call ABA timing of one build switch: `python -m finegemm bench <suite> <args>` built with
# the experiment flags in AB_FLAGS (e.g. a ptx/diag.cuh switch), as shipped, and with them again
# (the two flagged runs bound the drift between runs).
#   CPU machine:  precompile the kernels twice, the second time with FINEGEMM_EXTRA_NVCC_FLAGS="$AB_FLAGS"
#   GPU machine:  AB_FLAGS=-DFINEGEMM_DIAG_... bash scripts/ab_nvcc_flags.sh grouped --kinds wgrad k_grouped
#                 -> $OUT/ab_{flag1,base,flag2}.json
set -uo pipefail
source "$(dirname "$0")/_env.sh"
: "${AB_FLAGS:?set AB_FLAGS to the nvcc flags of the experiment}"
status=0
for run in flag1 base flag2; do
  flags=""; [[ "$run" == flag* ]] && flags="$AB_FLAGS"
  echo "== $run: FINEGEMM_EXTRA_NVCC_FLAGS='$flags'"
  # shellcheck disable=SC2068
  FINEGEMM_EXTRA_NVCC_FLAGS="$flags" timeout 240 python3 -m finegemm bench $@ \
    --num-tests "${FINEGEMM_BENCH_TESTS:-10}" --out "$OUT/ab_$run.json" 2>&1 | grep -v -i warn | grep -i geomean
  status=$(( status | ${PIPESTATUS[0]} ))
done
exit $status
