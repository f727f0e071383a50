#!/usr/bin/env bash
# One GPU call (v0.19): re-tune the dense FP8 shapes with M <= 256 and the BF16 bench set with the
# deep-ring candidates, ship the new tables in this checkout, then check them and bench.
# Usage on the GPU machine (caches precompiled on the CPU machine: scripts/precompile_tune.py with
# these shapes and scripts/precompile_bf16.py):  bash scripts/retune_deep_rings.sh  -> $OUT/
# RETUNE_BF16=0: the FP8 shapes only (v0.20: deep rings for the k-batch twins); RETUNE_SHAPES: other shapes.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [[ -z "${FINEGEMM_CACHE_DIR:-}" && -d .fgcache ]]; then export FINEGEMM_CACHE_DIR="$PWD/.fgcache"; fi
OUT="${OUT:-/tmp/finegemm-out}"; mkdir -p "$OUT"
status=0
shapes="${RETUNE_SHAPES:-}"  # "M,N,K ..." replaces the default 36 shapes
if [[ -z "$shapes" ]]; then
  for m in 1 16 32 64 128 256; do
    for nk in 2112,7168 24576,1536 32768,512 7168,16384 4096,7168 7168,2048; do shapes="$shapes $m,$nk"; done
  done
fi
cp finegemm/heuristics/tuned_sm90.json "$OUT/tuned_sm90.json"
cp finegemm/heuristics/tuned_sm90_bf16.json "$OUT/tuned_sm90_bf16.json"
# shellcheck disable=SC2086
python3 -m finegemm tune dense --shapes $shapes --table "$OUT/tuned_sm90.json" --out "$OUT/tune_dense.json" 2>&1 \
  | grep -v -i warn > "$OUT/tune_dense.log"; status=$(( status | ${PIPESTATUS[0]} ))
suites="dense"
if [[ "${RETUNE_BF16:-1}" != 0 ]]; then
  suites="dense bf16"
  python3 -m finegemm tune bf16 --table "$OUT/tuned_sm90_bf16.json" --out "$OUT/tune_bf16.json" 2>&1 \
    | grep -v -i warn > "$OUT/tune_bf16.log"; status=$(( status | ${PIPESTATUS[0]} ))
  tail -3 "$OUT/tune_bf16.log"
fi
tail -3 "$OUT/tune_dense.log"
cp "$OUT/tuned_sm90.json" finegemm/heuristics/tuned_sm90.json
cp "$OUT/tuned_sm90_bf16.json" finegemm/heuristics/tuned_sm90_bf16.json
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_fp8_gemm_gpu.py tests/gpu/test_bf16_gemm_gpu.py \
  -k "tuned_table_entries or deep_ring or every_kernel" 2>&1 | tail -15 > "$OUT/gpu_tests.log"
status=$(( status | ${PIPESTATUS[0]} )); tail -3 "$OUT/gpu_tests.log"
for suite in $suites; do
  python3 -m finegemm bench "$suite" --num-tests 20 --out "$OUT/$suite.json" > "$OUT/bench_$suite.log" 2>&1
  status=$(( status | $? )); tail -8 "$OUT/bench_$suite.log"
done
exit $status
