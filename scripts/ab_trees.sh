#!/usr/bin/env bash
# Same-run A/B of this checkout against an older source tree (GPU machine): the dense probes
# (scripts/probe_variants.py for FP8, scripts/probe_bf16_configs.py for BF16) run from each tree
# in its own processes, trees and host settings interleaved, ROUNDS times; JSON under $OUT.
#
#   # CPU machine: the old tree and its kernels (each tree's probes import that tree's package)
#   git archive <old commit> finegemm scripts pyproject.toml | tar -x -C .fgscratch/old
#   (cd .fgscratch/old && FINEGEMM_CACHE_DIR=$PWD/../old_cache python3 scripts/probe_bf16_configs.py --precompile $BF16_CASES
#    && FINEGEMM_CACHE_DIR=$PWD/../old_cache python3 scripts/probe_variants.py --precompile --variants base= --cases $FP8_CASES)
#   # GPU machine (carry .fgcache and .fgscratch)
#   BF16_CASES="..." FP8_CASES="..." VARIANTS="old new old-ws=FINEGEMM_DIAG_SPLIT_CLUSTER=0 ..." bash scripts/ab_trees.sh
#
# A variant is a tree name (old: .fgscratch/old with .fgscratch/old_cache; new: this checkout with
# .fgcache), optionally "-tag=NAME=VALUE" for one host environment setting of that run.
set -uo pipefail
source "$(dirname "$0")/_env.sh"
root="$PWD"
rounds="${ROUNDS:-2}"
for round in $(seq 1 "$rounds"); do
  for variant in ${VARIANTS:-old new}; do
    tree="${variant%%-*}"; tree="${tree%%=*}"
    setting=""; [[ "$variant" == *=* ]] && setting="${variant#*=}"
    if [[ "$tree" == old ]]; then dir="$root/.fgscratch/old"; cache="$root/.fgscratch/old_cache"
    else dir="$root"; cache="$root/.fgcache"; fi
    name="${variant%%=*}"
    echo "== round $round: $name ($dir${setting:+, $setting})"
    # shellcheck disable=SC2086
    if [[ -n "${BF16_CASES:-}" ]]; then
      env PYTHONPATH="$dir" FINEGEMM_CACHE_DIR="$cache" $setting \
        python3 "$dir/scripts/probe_bf16_configs.py" $BF16_CASES --num-tests "${NUM_TESTS:-30}" \
        --out "$OUT/bf16_${name}_r$round.json" 2>&1 | grep -v -i warn
    fi
    # shellcheck disable=SC2086
    if [[ -n "${FP8_CASES:-}" ]]; then
      env PYTHONPATH="$dir" FINEGEMM_CACHE_DIR="$cache" $setting \
        python3 "$dir/scripts/probe_variants.py" --variants base= --repeats 1 --num-tests "${NUM_TESTS:-30}" \
        --cases $FP8_CASES --out "$OUT/fp8_${name}_r$round.json" 2>&1 | grep -v -i warn
    fi
  done
done
