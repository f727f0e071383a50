#!/usr/bin/env bash
# A/B of the C prefetch into L2 (FP8 kernel, kHasC: wgrad, k-grouped, fp32 + C), in one call:
# `bench grouped --kinds wgrad k_grouped` with the prefetch compiled out
# (-DFINEGEMM_DIAG_NO_C_PREFETCH, ptx/diag.cuh), as built, and without it again (ABA: a drift
# between the runs shows as a difference of the two B runs).
#   CPU machine:  precompile both builds (scripts/precompile.py, then with
#                 FINEGEMM_EXTRA_NVCC_FLAGS=-DFINEGEMM_DIAG_NO_C_PREFETCH and --has-c-only)
#   GPU machine:  bash scripts/ab_c_prefetch.sh   -> $OUT/ab_c_prefetch_{off1,on,off2}.json
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [[ -z "${FINEGEMM_CACHE_DIR:-}" && -d .fgcache ]]; then export FINEGEMM_CACHE_DIR="$PWD/.fgcache"; fi
OUT="${OUT:-/tmp/finegemm-out}"; mkdir -p "$OUT"
status=0
for run in off1 on off2; do
  flags=""; [[ "$run" == off* ]] && flags="-DFINEGEMM_DIAG_NO_C_PREFETCH"
  echo "== C prefetch $run"
  FINEGEMM_EXTRA_NVCC_FLAGS="$flags" timeout 240 python3 -m finegemm bench grouped --kinds wgrad k_grouped \
    --num-tests "${FINEGEMM_BENCH_TESTS:-10}" --out "$OUT/ab_c_prefetch_$run.json" 2>&1 | grep -v -i warn | tail -16
  status=$(( status | ${PIPESTATUS[0]} ))
done
exit $status
