#!/usr/bin/env bash
# Precompile (no GPU needed) the variant kernels of device_run.sh's "pending" A/Bs into the cache
# that travels with the device call (FINEGEMM_CACHE_DIR, default ./.fgcache): a variant's nvcc flags
# are part of its kernels' cache keys, and compiling them on the device one by one inside the
# timed runs would spend the call's minutes in nvcc.
#   bash scripts/precompile_pending.sh [--jobs N]
set -euo pipefail
cd "$(dirname "$0")/.."
export FINEGEMM_CACHE_DIR="${FINEGEMM_CACHE_DIR:-$PWD/.fgcache}"
jobs="${2:-2}"
skinny="64,2112,7168 64,24576,1536 64,32768,512 64,7168,16384 64,4096,7168 64,7168,2048 128,2112,7168
  128,24576,1536 128,32768,512 128,7168,16384 128,4096,7168 128,7168,2048"
warm() {  # warm <nvcc flags> <warmup args...>
  local flags="$1"; shift
  FINEGEMM_EXTRA_NVCC_FLAGS="$flags" python3 -m finegemm warmup --sms 132 --jobs "$jobs" "$@"
}
# shellcheck disable=SC2086
for flags in "" -DFINEGEMM_DIAG_HALF_A_TMA; do
  warm "$flags" --shapes $skinny --kinds bf16_nt bf16_tn
  warm "$flags" --shapes 64,256,7168 128,256,7168 --kinds bf16_nt_fp32 bf16_tn_fp32
done
# shellcheck disable=SC2086
for flags in "" -DFINEGEMM_DIAG_K_ROTATE=1 -DFINEGEMM_DIAG_K_ROTATE=7; do
  warm "$flags" --shapes $skinny --kinds fp8
done
# B boxes over 2 / 4 k-blocks (device_run.sh ab_b_group): the same picks with b_group where they allow it.
# shellcheck disable=SC2086
for g in 2 4; do
  FINEGEMM_DIAG_B_GROUP=$g warm "" --shapes $skinny --kinds fp8 bf16_nt bf16_tt
done
# The v1.08 A/B's warp-form kernels (device_run.sh ab_split_spread): the split-cluster records' picks.
# shellcheck disable=SC2086
warm -DFINEGEMM_DIAG_SPLIT_CLUSTER_WARP_REDUCE --shapes 64,256,7168 128,256,7168 64,2112,7168 128,2112,7168 128,4096,7168 \
  --kinds bf16_nt_fp32 bf16_tn_fp32 bf16_nn_fp32 bf16_tt_fp32 bf16_nt bf16_tt bf16_nn bf16_tn
# The v1.09 probe's forced configs (device_run.sh ab_fp32_direct): the fp32-D tiles without staging.
# shellcheck disable=SC2046
python3 scripts/probe_bf16_configs.py --precompile $(sed -n '/^FP32_DIRECT_CASES="/,/"$/p' scripts/device_run.sh | tr -d '"' | sed 's/^FP32_DIRECT_CASES=//')
