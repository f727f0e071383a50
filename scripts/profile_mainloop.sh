#!/usr/bin/env bash
# ncu profile (full set, SASS-level source counters) of the dense FP8 kernel on one shape.
# Usage on the GPU machine: bash scripts/profile_mainloop.sh 4096,4096,7168  -> $OUT/profile_*.txt
# A forced configuration: bash scripts/profile_mainloop.sh "64,4096,7168:64,32,16,1,0,0" 16
# (the case syntax of scripts/probe_variants.py; the second argument lifts the stage cap).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export FINEGEMM_LINEINFO=1 FINEGEMM_CACHE_DIR="${FINEGEMM_CACHE_DIR:-/tmp/finegemm-prof-cache}"
OUT="${OUT:-/tmp/finegemm-out}"; mkdir -p "$OUT"
shape="${1:-4096,4096,7168}"; tag="${shape//,/x}"; tag="${tag//:/_}"; stages="${2:-}"
FINEGEMM_PRINT_CONFIGS=1 python3 scripts/profile_dense.py "$shape" $stages 2>&1 | tail -3   # compile outside the profiler
ncu --clock-control none -k regex:finegemm_entry --launch-skip 2 --launch-count 1 --set full \
    --import-source yes -f -o "/tmp/prof_$tag" python3 scripts/profile_dense.py "$shape" $stages > /dev/null 2>&1
ncu -i "/tmp/prof_$tag.ncu-rep" --page details > "$OUT/profile_${tag}_details.txt" 2>&1
ncu -i "/tmp/prof_$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/profile_${tag}_sass.csv" 2>&1
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Registers Per|Achieved Occ" \
    "$OUT/profile_${tag}_details.txt" | head -20
