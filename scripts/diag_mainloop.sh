#!/usr/bin/env bash
# Which side sets the skinny main loop's ~350 cycles per k-block (benchmarks/NOTES.md v0.19)?
# Times and traces the same forced configurations four ways (ptx/diag.cuh): as built, without
# the wgmmas and promotion (the data path alone: TMA, the scale warp, the barriers), the same
# with 2 TMA boxes per k-block instead of 3 (no sfa box: does the box count set the rate?), and
# without the loads (the consumers alone). Results of the diagnostic builds are wrong by design;
# only their times matter.
#   CPU machine:  FINEGEMM_CACHE_DIR=$PWD/.fgcache bash scripts/diag_mainloop.sh --precompile
#   GPU machine:  bash scripts/diag_mainloop.sh        -> $OUT/diag_variants.json, $OUT/diag_traces.tgz
set -uo pipefail
source "$(dirname "$0")/_env.sh"
# Split-K cases too (the trace now covers them): does a wider tile keep ~350 cycles per k-block,
# and what does the reduction cost?
# DIAG_CASES / DIAG_VARIANTS (space-separated, same syntax) replace the defaults.
CASES=(64,4096,7168:64,32,16,1,0,0 128,4096,7168:128,32,10,1,0,1 64,7168,16384:64,64,8,1,0,0
       64,2112,7168:64,32,16,1,0,0 4096,4096,7168:128,208,4,1,0,1
       64,4096,7168:64,64,8,1,0,0,0,1,2 64,4096,7168:64,128,8,1,0,0,0,1,4)
VARIANTS=(base= no_mma=-DFINEGEMM_DIAG_NO_MMA "no_mma_sfa=-DFINEGEMM_DIAG_NO_MMA -DFINEGEMM_DIAG_NO_SFA_TMA"
          no_tma=-DFINEGEMM_DIAG_NO_TMA)
if [[ -n "${DIAG_CASES:-}" ]]; then read -r -a CASES <<< "$DIAG_CASES"; fi
if [[ -n "${DIAG_VARIANTS:-}" ]]; then read -r -a VARIANTS <<< "$DIAG_VARIANTS"; fi
if [[ "${1:-}" == --precompile ]]; then
  python3 scripts/probe_variants.py --precompile --max-stages 16 --variants "${VARIANTS[@]}" --cases "${CASES[@]}"
  for v in "${VARIANTS[@]}"; do
    FINEGEMM_EXTRA_NVCC_FLAGS="${v#*=}" python3 scripts/trace_tiles.py --precompile --max-stages 16 "${CASES[@]}"
  done
  exit 0
fi
status=0
python3 scripts/probe_variants.py --max-stages 16 --child-timeout 90 --repeats 2 --variants "${VARIANTS[@]}" \
  --cases "${CASES[@]}" --out "$OUT/diag_variants.json" 2>&1 | tail -12
status=$(( status | ${PIPESTATUS[0]} ))
for v in "${VARIANTS[@]}"; do
  for flush in "" --flush-l2; do
    echo "== ${v%%=*} ${flush:-l2-warm}"
    FINEGEMM_EXTRA_NVCC_FLAGS="${v#*=}" timeout 120 python3 scripts/trace_tiles.py --max-stages 16 $flush \
      "${CASES[@]}" --out "$OUT/diag_trace_${v%%=*}${flush:+_flush}.json" 2>&1 | grep -v -i warn | cut -c1-220
    status=$(( status | ${PIPESTATUS[0]} ))
  done
done
(cd "$OUT" && tar czf diag_traces.tgz diag_trace_*.json && rm -f diag_trace_*.json)
exit $status
