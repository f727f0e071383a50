#!/usr/bin/env bash
# Re-tune the dense tuned entries of the given shapes on the GPU machine (after a main-loop change):
#   bash scripts/retune_dense.sh M,N,K ...   -> $OUT/tuned_sm90.json (table with the new winners),
#                                               $OUT/tune_dense.json (every candidate's check and time)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [[ -z "${FINEGEMM_CACHE_DIR:-}" && -d .fgcache ]]; then export FINEGEMM_CACHE_DIR="$PWD/.fgcache"; fi
OUT="${OUT:-/tmp/finegemm-out}"; mkdir -p "$OUT"
cp finegemm/heuristics/tuned_sm90.json "$OUT/tuned_sm90.json"
python3 -m finegemm tune dense --shapes "$@" --table "$OUT/tuned_sm90.json" --out "$OUT/tune_dense.json" 2>&1 \
  | grep -v -i "warn" | tee "$OUT/tune_dense.log"
