#!/usr/bin/env bash
# Add to the carried kernel cache the cubins `device_run.sh ab_ffma_yield` needs: the kernels of its
# shapes built with each FINEGEMM_DIAG_FFMA_YIELD value (their own cache keys), beside today's.
#   [FFMA_MODES="all none"] bash scripts/precompile_ffma_yield.sh [.fgscratch/fgcache.tgz]
set -euo pipefail
cd "$(dirname "$0")/.."
tgz="${1:-.fgscratch/fgcache.tgz}"
work=$(mktemp -d)
tar xzf "$tgz" -C "$work"
export FINEGEMM_CACHE_DIR="$work/.fgcache"
shapes=$(sed -n '/^FFMA_YIELD_SHAPES="/,/"$/p' scripts/device_run.sh | tr -d '"' | sed 's/^FFMA_YIELD_SHAPES=//')
for mode in ${FFMA_MODES:-"" all 9/16 none}; do
  # shellcheck disable=SC2086
  FINEGEMM_DIAG_FFMA_YIELD="$mode" python3 -m finegemm warmup --shapes $shapes --jobs 2
done
tar czf "$tgz.new" -C "$work" .fgcache && mv "$tgz.new" "$tgz"
rm -rf "$work"
