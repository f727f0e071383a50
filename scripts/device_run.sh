#!/usr/bin/env bash
# One call on the H200 machine: GPU tests + benchmarks, logs and JSON under $OUT.
# Usage (from the repo root on the GPU machine):
#   bash scripts/device_run.sh [all|tests|bench|sanitize|tune|pending|ab_contiguous|ab_bf16_half_a|ab_rotate|
#                               fp8_einsum|ab_einsum|ab_einsum_tma|ab_split_tma|psum|psum_ncu|b_stream|ab_b_group|ab_b_group_bf16|b_group|b_group_check|ab_ffma_yield|
#                               ab_split_spread|ab_fp32_direct|bf16_m128|skinny_l2|
#                               bf16_multicast|cluster_fence|host]
# "pending": the same-run A/Bs waiting for a GPU (below; their variant kernels precompiled into the
# carried cache by scripts/precompile_pending.sh).
# Every later GPU claim in benchmarks/results/ comes from this script.
# Pass the commit: FINEGEMM_COMMIT=<HEAD of the checkout that sent the run> (the JSONs
# "commit"): the device copy's git metadata can lag the working tree it runs (NOTES v0.86).
set -uo pipefail
source "$(dirname "$0")/_env.sh"
export FINEGEMM_CACHE_DIR="${FINEGEMM_CACHE_DIR:-/tmp/finegemm-cache}"
what="${1:-all}"
status=0

python3 -m finegemm info 2>&1 | tee "$OUT/info.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv 2>&1 | tee -a "$OUT/info.txt"

if [[ "$what" == all || "$what" == tests ]]; then
  # FINEGEMM_GPU_TESTS narrows the run (default: every GPU test); a hung kernel cannot eat the
  # whole call: the suite is stopped after FINEGEMM_GPU_TEST_TIMEOUT seconds.
  # shellcheck disable=SC2086
  timeout "${FINEGEMM_GPU_TEST_TIMEOUT:-420}" python3 -m pytest -q -rs -m gpu \
    ${FINEGEMM_GPU_TESTS:-tests/gpu} \
    -p no:cacheprovider --timeout 120 --timeout_method thread -s 2>&1 | tee "$OUT/gpu_tests.log"
  status=$(( status | ${PIPESTATUS[0]} ))
  python3 -m finegemm check 2>&1 | tee "$OUT/check.log"
  status=$(( status | ${PIPESTATUS[0]} ))
fi
if [[ "$what" == sanitize || "$what" == b_group_check ]]; then
  # compute-sanitizer over small calls of every validated kernel (slow: not part of "all").
  # FINEGEMM_SANITIZE_ONLY: substrings of the case names to run alone (e.g. "einsum");
  # b_group_check: the B-group tiles alone.
  [[ "$what" == b_group_check ]] && FINEGEMM_SANITIZE_ONLY=b-groups
  for tool in memcheck racecheck synccheck; do
    # shellcheck disable=SC2086
    timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 3 python3 scripts/sanitize_cases.py \
      ${FINEGEMM_SANITIZE_ONLY:-} 2>&1 | tee "$OUT/sanitize_$tool.log"
    status=$(( status | ${PIPESTATUS[0]} ))
  done
fi
if [[ "$what" == tune ]]; then
  # Re-tune on this GPU: the shipped tables plus fresh winners -> $OUT/tuned_sm90*.json (copy them
  # to finegemm/heuristics/ to ship them). FINEGEMM_TUNE_FAMILIES narrows (default: dense wgrad);
  # FINEGEMM_TUNE_SHAPES ("M,N,K ..." or "G,M,N,K ..." for masked) replaces the default shapes;
  # FINEGEMM_TUNE_ARGS adds tune options (e.g. "--block-m 192").
  # The BF16 families (bf16, bf16_masked, bf16_contiguous) write to the BF16 table's copy.
  cp finegemm/heuristics/tuned_sm90.json "$OUT/tuned_sm90.json"
  cp finegemm/heuristics/tuned_sm90_bf16.json "$OUT/tuned_sm90_bf16.json"
  for fam in ${FINEGEMM_TUNE_FAMILIES:-dense wgrad}; do
    extra=""; [[ "$fam" == dense ]] && extra="--curve"
    [[ -n "${FINEGEMM_TUNE_SHAPES:-}" ]] && extra="--shapes $FINEGEMM_TUNE_SHAPES"
    extra="$extra ${FINEGEMM_TUNE_ARGS:-}"  # e.g. "--block-m 192"
    table="$OUT/tuned_sm90.json"; [[ "$fam" == bf16* ]] && table="$OUT/tuned_sm90_bf16.json"
    # shellcheck disable=SC2086
    python3 -m finegemm tune "$fam" $extra --table "$table" --out "$OUT/tune_$fam.json" 2>&1 \
      | grep -v -i "warn" | tee "$OUT/tune_$fam.log"
    status=$(( status | ${PIPESTATUS[0]} ))
  done
fi
# "pending": the measurements waiting for a GPU (benchmarks/NOTES.md, the newest State block), each
# an interleaved same-run A/B (scripts/ab_bench_variants.sh) into its own folder under $OUT; a mode
# of its name runs one alone.
ab() {  # ab <folder> <SUITE> <VARIANTS> <bench args...>
  local dir="$OUT/$1" suite="$2" variants="$3"; shift 3
  mkdir -p "$dir"
  OUT="$dir" VARIANTS="$variants" ROUNDS="${FINEGEMM_PENDING_ROUNDS:-2}" SUITE="$suite" FINEGEMM_BENCH_TESTS=20 \
    bash scripts/ab_bench_variants.sh "$@" 2>&1 | tee "$dir/ab.log"
  status=$(( status | ${PIPESTATUS[0]} ))
  python3 scripts/ab_summary.py "$dir"/ab_*.json 2>&1 | tee "$dir/summary.txt"
}
SKINNY_FP8="64,2112,7168 64,24576,1536 64,32768,512 64,7168,16384 64,4096,7168 64,7168,2048 128,2112,7168
  128,24576,1536 128,32768,512 128,7168,16384 128,4096,7168 128,7168,2048"
if [[ "$what" == pending || "$what" == ab_contiguous ]]; then
  # One launch per contiguous call (the GEMM checks the layout) against the check kernel + GEMM.
  ab ab_contiguous grouped "one= two=env:FINEGEMM_DISABLE_PATHS=fp8_contiguous_layout_in_gemm" --kinds contiguous
  ab ab_contiguous_bf16 bf16 "one= two=env:FINEGEMM_DISABLE_PATHS=bf16_contiguous_layout_in_gemm" \
    --layouts --grouped-layouts grouped_contiguous
fi
if [[ "$what" == pending || "$what" == ab_bf16_half_a ]]; then
  # The bound on a 2-CTA multicast of A for the BF16 skinny shapes: A's box loaded on even k-blocks
  # only (wrong results; the time is what matters).
  # shellcheck disable=SC2086
  ab ab_bf16_half_a bf16 "base= halfA=-DFINEGEMM_DIAG_HALF_A_TMA" --layouts nt tn --no-grouped --shapes $SKINNY_FP8 \
    64,256,7168,fp32 128,256,7168,fp32
fi
if [[ "$what" == pending || "$what" == ab_rotate ]]; then
  # The FP8 k-block rotation (v0.95) on the 12 skinny anchors.
  # shellcheck disable=SC2086
  ab ab_rotate dense "base= rot1=-DFINEGEMM_DIAG_K_ROTATE=1 rot7=-DFINEGEMM_DIAG_K_ROTATE=7" --shapes $SKINNY_FP8
fi
if [[ "$what" == b_group || "$what" == b_group_check ]]; then
  # v1.05 in one call (~6-7 min): the B groups' GPU tests here, then the A/B (ab_b_group) and the
  # B-stream probe (b_stream) below. b_group_check (~3 min): the tests, the B-group tiles under
  # the sanitizers (above; scripts/sanitize_cases.py's B_GROUP_TILES) and the probe.
  timeout 150 python3 -m pytest -q -rs -m gpu tests/gpu/test_fp8_gemm_gpu.py tests/gpu/test_bf16_gemm_gpu.py \
    -k b_group -p no:cacheprovider --timeout 120 --timeout_method thread 2>&1 | tee "$OUT/b_group_gpu_tests.log"
  status=$(( status | ${PIPESTATUS[0]} ))
fi
if [[ "$what" == b_group || "$what" == ab_b_group ]]; then
  # B boxes over 2 / 4 k-blocks (v1.05, FINEGEMM_DIAG_B_GROUP: every selected dense config that
  # allows it) on the 12 skinny anchors, FP8 and BF16 with a K-major B (nt, tt), their kernels
  # precompiled by precompile_pending.sh.
  # shellcheck disable=SC2086
  ab ab_b_group dense "base= g2=env:FINEGEMM_DIAG_B_GROUP=2 g4=env:FINEGEMM_DIAG_B_GROUP=4" --shapes $SKINNY_FP8
fi
if [[ "$what" == b_group || "$what" == ab_b_group || "$what" == ab_b_group_bf16 ]]; then
  # ab_b_group_bf16 alone (v1.06): the table's groups (base) against none (g1) and G = 2 wherever
  # it fits (g2); FP8 and G = 4 lost on an H100 (NOTES v1.05).
  variants="base= g2=env:FINEGEMM_DIAG_B_GROUP=2 g4=env:FINEGEMM_DIAG_B_GROUP=4"
  [[ "$what" == ab_b_group_bf16 ]] && variants="base= g1=env:FINEGEMM_DIAG_B_GROUP=1 g2=env:FINEGEMM_DIAG_B_GROUP=2"
  # shellcheck disable=SC2086
  ab ab_b_group_bf16 bf16 "$variants" --layouts nt tt --no-grouped --shapes $SKINNY_FP8
fi
bf16_checks() {  # bf16_checks <name> <pytest -k> <sanitize_cases.py substring> <pytest timeout s>:
  # the BF16 GPU file's matching tests, then the three sanitizers on the matching cases
  timeout "$4" python3 -m pytest -q -rs -m gpu tests/gpu/test_bf16_gemm_gpu.py -k "$2" -p no:cacheprovider \
    --timeout 120 --timeout_method thread 2>&1 | tee "$OUT/${1}_gpu_tests.log"
  status=$(( status | ${PIPESTATUS[0]} ))
  for tool in memcheck racecheck synccheck; do
    timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 3 python3 scripts/sanitize_cases.py \
      "$3" 2>&1 | tee "$OUT/sanitize_${1}_$tool.log"
    status=$(( status | ${PIPESTATUS[0]} ))
  done
}
split_checks() {  # the BF16 split-cluster GPU tests and "bf16 split cluster" sanitizer cases
  bf16_checks split split "bf16 split cluster" 200
}
# ab_split_spread (v1.08): the BF16 split-cluster GPU tests and sanitizer cases, then the spread
# reduction (base: fp32 D without C, enough splits) against the warp form of v0.57 (warp, a build
# flag: scripts/precompile_pending.sh) on every M <= 128 record whose table pick is a split cluster
# (the bf16 ones run the warp form in both: a control).
if [[ "$what" == ab_split_spread ]]; then
  split_checks
  ab ab_split_spread bf16 \
    "${SPLIT_SPREAD_VARIANTS:-base= warp=-DFINEGEMM_DIAG_SPLIT_CLUSTER_WARP_REDUCE}" \
    --layouts nt nn tn tt --no-grouped --shapes 64,2112,7168 128,2112,7168 128,4096,7168 64,256,7168,fp32 128,256,7168,fp32
fi
# ab_fp32_direct (v1.09 probe): the dense BF16 fp32-D tiles without the bf16 staging they never use
# (one more stage: bm128 bn256 3 -> 4, bm64 bn256 4 -> 5) against the table's picks, forced configs
# interleaved over FINEGEMM_PENDING_ROUNDS rounds (scripts/probe_bf16_configs.py; kernels precompiled
# with its --precompile). FINEGEMM_FP32_DIRECT_CASES replaces the cases (any probe_bf16_configs
# cases: the v1.09 ring sweeps ran this way). With the split tests and "bf16 split cluster"
# sanitizer cases first when FINEGEMM_SPLIT_CHECK=1.
FP32_DIRECT_CASES="128,129280,7168,nt,f32:auto 128,129280,7168,nt,f32:128,256,1,4,direct
  128,129280,7168,tn,f32:auto 128,129280,7168,tn,f32:128,256,1,4,direct
  128,129280,7168,nn,f32:auto 128,129280,7168,nn,f32:128,256,1,4,direct
  128,129280,7168,tt,f32:auto 128,129280,7168,tt,f32:128,256,1,4,direct
  64,129280,7168,nt,f32:auto 64,129280,7168,nt,f32:64,256,1,5,direct
  64,129280,7168,tn,f32:auto 64,129280,7168,tn,f32:64,256,1,5,direct
  64,129280,7168,tt,f32:auto 64,129280,7168,tt,f32:64,128,1,9,direct
  4096,129280,7168,nt,f32:auto 4096,129280,7168,nt,f32:128,256,1,4,direct"
if [[ "$what" == ab_fp32_direct ]]; then
  [[ "${FINEGEMM_SPLIT_CHECK:-0}" == 1 ]] && split_checks
  # shellcheck disable=SC2086
  python3 scripts/probe_bf16_configs.py ${FINEGEMM_FP32_DIRECT_CASES:-$FP32_DIRECT_CASES} --rounds "${FINEGEMM_PENDING_ROUNDS:-3}" --num-tests 20 \
    --out "$OUT/ab_fp32_direct.json" 2>&1 | tee "$OUT/ab_fp32_direct.log"
  status=$(( status | ${PIPESTATUS[0]} ))
fi
# ab_ffma_yield (v1.07 probe): the FP8 promotion FFMAs' reuse / no-yield hints cleared in the cubin
# (FINEGEMM_DIAG_FFMA_YIELD, jit/sass_patch.py) on every reused FFMA of each run (yall), or the
# no-yield hint on every FFMA of each run (ynone), against today's cubins, on the compute-bound M = 4096 shapes and
# four skinny ones (the variants' cubins: scripts/precompile_ffma_yield.sh).
FFMA_YIELD_SHAPES="4096,2112,7168 4096,24576,1536 4096,32768,512 4096,7168,16384 4096,4096,7168 4096,7168,2048
  64,2112,7168 128,4096,7168 64,7168,16384 128,24576,1536"
if [[ "$what" == ab_ffma_yield ]]; then
  # shellcheck disable=SC2086
  # (the first call, H100 486e674: yall +3.4-4.6% and y916 +1.7-2.9% time at M = 4096; now the
  # opposite, ynone: no FFMA of a run may yield)
  ab ab_ffma_yield dense "${FFMA_YIELD_VARIANTS:-base= ynone=env:FINEGEMM_DIAG_FFMA_YIELD=none yall=env:FINEGEMM_DIAG_FFMA_YIELD=all}" \
    --shapes $FFMA_YIELD_SHAPES
fi
if [[ "$what" == pending || "$what" == fp8_einsum ]]; then
  # fp8_einsum at DeepSeek's MLA sizes: the heads-packed kernel (gated) against the masked
  # composition and torch's bf16 bmm, kernel-only and host time (scripts/probe_fp8_einsum.py).
  python3 scripts/probe_fp8_einsum.py --out "$OUT/fp8_einsum.json" 2>&1 | tee "$OUT/fp8_einsum.log"
  status=$(( status | ${PIPESTATUS[0]} ))
fi
# fp8_einsum's heads-packed path alone under two builds or switches, alternating processes
# (FINEGEMM_PENDING_ROUNDS rounds): einsum_ab <folder> <name>=[VAR=value] ... -> <folder>/<name>_<round>.json
einsum_ab() {
  local dir="$OUT/$1"; shift
  mkdir -p "$dir"
  for round in $(seq "${FINEGEMM_PENDING_ROUNDS:-2}"); do
    for variant in "$@"; do
      local name="${variant%%=*}" assignment="${variant#*=}"
      # shellcheck disable=SC2086
      env $assignment python3 scripts/probe_fp8_einsum.py --paths heads_packed --out "$dir/${name}_$round.json" 2>&1 \
        | tee "$dir/${name}_$round.log"
      status=$(( status | ${PIPESTATUS[0]} ))
    done
  done
}
if [[ "$what" == ab_einsum ]]; then
  # v1.01: the sfa warp's cp.async copies against v1.00's loads into registers (the variant's
  # kernels and host library precompiled with the flag).
  einsum_ab ab_einsum "cp_async=" "ldg=FINEGEMM_EXTRA_NVCC_FLAGS=-DFINEGEMM_DIAG_SFA_GATHER_LDG"
fi
if [[ "$what" == ab_einsum_tma ]]; then
  # v1.03: the heads-packed kernel's TMA stores against its direct stores.
  einsum_ab ab_einsum_tma "tma=" "direct=FINEGEMM_DISABLE_PATHS=fp8_einsum_tma_store"
fi
if [[ "$what" == ab_split_tma ]]; then
  # v1.04: the split clusters' per-warp TMA stores against their direct stores (the same kernels;
  # the host's FINEGEMM_DIAG_SPLIT_TMA_STORE=0 keeps the direct stores), the heuristics' split picks.
  dir="$OUT/ab_split_tma"; mkdir -p "$dir"
  OUT="$dir" VARIANTS="tma= direct=env:FINEGEMM_DIAG_SPLIT_TMA_STORE=0" ROUNDS="${FINEGEMM_PENDING_ROUNDS:-2}" \
    bash scripts/ab_probe_variants.sh --set split --kinds fp8_dense bf16_dense 2>&1 | tee "$dir/ab.log"
  status=$(( status | ${PIPESTATUS[0]} ))
  python3 scripts/ab_summary.py --base direct "$dir"/ab_*.json 2>&1 | tee "$dir/summary.txt"
fi
if [[ "$what" == pending || "$what" == psum ]]; then
  # The FP8 GEMM reading psum ends itself (gated, v0.99): its GPU tests (the gate opened by the tests),
  # then one launch against the check kernel + GEMM per psum call (scripts/probe_psum_in_gemm.py).
  timeout 300 python3 -m pytest -q -rs -m gpu tests/gpu/test_contiguous_layout_gpu.py -k psum -p no:cacheprovider \
    --timeout 120 --timeout_method thread 2>&1 | tee "$OUT/psum_gpu_tests.log"
  status=$(( status | ${PIPESTATUS[0]} ))
  python3 scripts/probe_psum_in_gemm.py --out "$OUT/psum_in_gemm.json" 2>&1 | tee "$OUT/psum_in_gemm.log"
  status=$(( status | ${PIPESTATUS[0]} ))
fi
if [[ "$what" == psum_ncu ]]; then
  # The FP8 psum question at G = 4 x ~8192 (NOTES v0.99 / v1.00: +2.9% in the GEMM, within the clock
  # drift): each path's kernels under Nsight Compute at its locked base clocks (--clock-control
  # base), so the two GEMMs' durations compare without the drift. -> $OUT/psum_ncu.csv
  timeout "${FINEGEMM_NCU_TIMEOUT:-240}" ncu --clock-control base --csv \
    --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size \
    -k finegemm_entry python3 scripts/probe_psum_in_gemm.py --only 4,8192 --families fp8 --rounds 2 \
    --plain-calls 4 > "$OUT/psum_ncu.csv" 2> "$OUT/psum_ncu.log"
  status=$(( status | $? ))
fi
if [[ "$what" == b_group || "$what" == b_group_check || "$what" == b_stream ]]; then
  # The skinny shapes' B-stream bound with wider boxes (scripts/probe_b_stream.cu; no MMA, no
  # library): N,K,bn,layout(0 2d / 1 3d / 2 4d / 3 linear copies),G,slots,splits,copies,a_rows. Two rounds.
  nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I finegemm/include \
    scripts/probe_b_stream.cu -o /tmp/probe_b_stream 2>&1 | tee "$OUT/b_stream_build.log"
  cases="4096,7168,64,0,1,8,2,1,0 4096,7168,64,0,1,8,2,1,128 4096,7168,64,0,2,4,2,1,0 4096,7168,64,1,2,4,2,1,0
    4096,7168,64,2,2,4,2,1,0 4096,7168,64,2,4,2,2,1,0 4096,7168,64,2,4,4,2,1,0 4096,7168,64,2,7,2,2,1,0
    4096,7168,64,2,2,4,2,1,128 4096,7168,64,2,4,2,2,1,128 4096,7168,64,0,1,16,2,1,0 4096,7168,64,0,1,24,2,1,0
    4096,7168,64,0,1,13,1,2,0 4096,7168,64,2,4,3,1,2,0 4096,7168,32,0,1,16,1,1,0 4096,7168,32,2,4,4,1,1,0
    4096,7168,32,2,8,2,1,1,0 4096,7168,128,0,1,8,4,1,0 4096,7168,128,2,2,4,4,1,0 2112,7168,32,0,1,16,2,1,0
    2112,7168,32,2,4,4,2,1,0 2112,7168,64,0,1,8,4,1,0 2112,7168,64,2,2,4,4,1,0 2112,7168,64,2,7,2,4,1,0
    7168,2048,56,0,1,8,1,1,0 7168,2048,56,2,4,2,1,1,0 7168,2048,56,2,2,4,1,1,0 7168,16384,56,0,1,8,1,1,0
    7168,16384,56,2,4,2,1,1,0 4096,7168,64,3,1,8,2,1,0 4096,7168,64,3,2,4,2,1,0 4096,7168,64,3,4,2,2,1,0
    2112,7168,64,3,2,4,4,1,0 7168,16384,56,3,4,2,1,1,0"
  for round in 1 2; do
    # shellcheck disable=SC2086
    timeout 120 /tmp/probe_b_stream $cases --iters 50 --check 2>&1 | tee "$OUT/b_stream_$round.jsonl"
    status=$(( status | ${PIPESTATUS[0]} ))
  done
fi
if [[ "$what" == bf16_m128 ]]; then
  # #5's M <= 128 records alone (~1-2 min): the dense BF16 suite's M <= 128 shapes, no grouped
  # records, and the targets' M <= 128 line (the other #5 lines need the whole suite).
  # shellcheck disable=SC2046
  python3 -m finegemm bench bf16 --no-grouped --num-tests "${FINEGEMM_BENCH_TESTS:-20}" --out "$OUT/bf16_m128.json" \
    --shapes $(python3 -c "from finegemm.bench.bf16 import bench_shapes
print(' '.join(f'{m},{n},{k}' + (',fp32' if f else '') for m, n, k, f in bench_shapes() if m <= 128))") \
    2>&1 | tee "$OUT/bench_bf16_m128.log"
  status=$(( status | ${PIPESTATUS[0]} ))
  python3 -m finegemm targets --bf16 "$OUT/bf16_m128.json" 2>&1 | grep "#5 | dense M <= 128" | tee "$OUT/targets_m128.md"
fi
# skinny_l2 (fifty-fifth session): do the skinny FP8 tiles lose to the bytes they pull from L2?
# 128x4096x7168 runs bm128 bn64 x 2 splits (88 MB from L2 for a 29 MB weight; M = 64's table tile
# pulls 59 MB and runs 1.4 us faster on the same B stream). Forced tiles that pull 44-59 MB (A
# shared by a multicast pair, 4 splits through the workspace, 64 CTAs) against the table's, plus
# the same question at N = 7168; then the per-tile traces of the M = 4096 table tiles (where a
# tile's head and epilogue go, scripts/trace_tiles.py; and of four skinny table tiles: how long
# the first stage takes to land). Kernels: precompiled by the same commands
# with --precompile (they are in the carried cache).
SKINNY_L2_CASES="128,4096,7168:auto 128,4096,7168:128,64,8,2,1,0,0,1,2 128,4096,7168:128,128,6,1,0,0,0,1,4
  128,4096,7168:128,128,6,2,1,0,0,1,4 128,4096,7168:128,128,6,1,0,0,0,1,2 128,4096,7168:64,64,13,2,0,0,0,1,1
  128,7168,2048:auto 128,7168,2048:128,128,6,2,1,0,0,1,2 128,7168,2048:128,64,8,2,1,0,0,1,1
  128,7168,16384:auto 128,7168,16384:128,64,8,2,1,0,0,2,1 128,7168,16384:128,128,6,1,0,0,0,1,2"
M4096_TRACE_CASES="4096,7168,2048:auto 4096,4096,7168:auto 4096,2112,7168:auto 4096,24576,1536:auto 4096,7168,16384:auto
  128,4096,7168:auto 64,4096,7168:auto 64,2112,7168:auto 128,7168,2048:auto"
if [[ "$what" == skinny_l2 ]]; then
  # shellcheck disable=SC2086
  python3 scripts/probe_variants.py --cases $SKINNY_L2_CASES --variants "base=" "ws=env:FINEGEMM_DIAG_SPLIT_CLUSTER=0" \
    --repeats "${FINEGEMM_PENDING_ROUNDS:-2}" --out "$OUT/skinny_l2.json" 2>&1 | tee "$OUT/skinny_l2.log"
  status=$(( status | ${PIPESTATUS[0]} ))
  # Which side sets 128x4096x7168 at the table's tile and at DeepGEMM 2.6.1's (bm64 bn64, one tile
  # per CTA over the whole K: 15.4 us here against its 13.94 in the tuner's H200 runs), with M = 64's
  # table tile beside: the consumers alone (no TMA), the data path alone (no MMA), without A's loads, without the skinny L2 hints.
  python3 scripts/probe_variants.py --cases 128,4096,7168:auto 128,4096,7168:64,64,13,1,0,0,0,1,1 64,4096,7168:auto \
    --variants "base=" "nomma=-DFINEGEMM_DIAG_NO_MMA" "notma=-DFINEGEMM_DIAG_NO_TMA" "noa=-DFINEGEMM_DIAG_NO_A_TMA" "nol2=-DFINEGEMM_DIAG_NO_L2_HINTS" \
    --repeats "${FINEGEMM_PENDING_ROUNDS:-2}" --out "$OUT/skinny_sides.json" 2>&1 | tee "$OUT/skinny_sides.log"
  status=$(( status | ${PIPESTATUS[0]} ))
  # shellcheck disable=SC2086
  python3 scripts/trace_tiles.py $M4096_TRACE_CASES --out "$OUT/trace_m4096.json" 2>&1 | tee "$OUT/trace_m4096.log"
  status=$(( status | ${PIPESTATUS[0]} ))
fi
# bf16_multicast (fifty-fifth session): the BF16 2-CTA multicast pairs (forced configs) in one call:
# their GPU tests, the sanitizers on their cases, then the same tile with and without a shared
# operand where v0.47's half-operand bound said a multicast could pay (M = 4096 nt, N = 2112 the
# most) and on the mid-M LM head (B shared by the two m-blocks; the tall tile sharing A is
# cuBLAS's 256 x 128 pair). Kernels: scripts/precompile_bf16.py and probe_bf16_configs.py
# --precompile with these cases.
MC_AB_CASES="4096,2112,7168,nt:auto 4096,2112,7168,nt:128,176,1,4,mcb 4096,2112,7168,nt:128,176,1,4,mca
  4096,4096,7168,nt:auto 4096,4096,7168,nt:128,256,1,3,mcb 4096,4096,7168,nt:128,256,1,3,mca
  4096,7168,2048,nt:auto 4096,7168,2048,nt:128,160,1,5,mcb 1024,4096,7168,nt:auto 1024,4096,7168,nt:128,256,1,3,mcb
  256,128256,4096,nt:auto 256,128256,4096,nt:128,256,1,3,mcb 256,128256,4096,nt:256,128,1,3,mca
  256,128256,4096,tn:auto 256,128256,4096,tn:128,256,1,3,mcb 512,128256,4096,nt:auto 512,128256,4096,nt:128,256,1,3,mcb"
if [[ "$what" == bf16_multicast ]]; then
  bf16_checks multicast multicast "bf16 multicast" 240
  # shellcheck disable=SC2086
  python3 scripts/probe_bf16_configs.py $MC_AB_CASES --rounds "${FINEGEMM_PENDING_ROUNDS:-2}" \
    --out "$OUT/ab_multicast.json" 2>&1 | tee "$OUT/ab_multicast.log"
  status=$(( status | ${PIPESTATUS[0]} ))
fi
# cluster_fence (NOTES v1.13): what a cluster barrier costs by the way it publishes shared memory
# (every thread's release arrive; relaxed arrives; one thread's cumulative fence after bar.sync;
# a fence per warp), 66 and 1 clusters, without and with outstanding global stores. ~10 s.
if [[ "$what" == cluster_fence ]]; then
  nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a scripts/probe_cluster_fence.cu \
    -o /tmp/probe_cluster_fence 2>&1 | tee "$OUT/cluster_fence_build.log"
  for args in "--clusters 66" "--clusters 66 --stores" "--clusters 1" "--clusters 1 --stores"; do
    # shellcheck disable=SC2086
    /tmp/probe_cluster_fence $args 2>&1 | tee -a "$OUT/cluster_fence.jsonl"
    status=$(( status | ${PIPESTATUS[0]} ))
  done
fi
if [[ "$what" == host ]]; then
  # The host fast paths' GPU suite (the second levels and the host library's launch copies; it
  # lifted their gates at 735778f), then their cost per call (cached, moved, moved with the copy
  # off, validated) into host_cost.json.
  timeout 240 python3 -m pytest -q -rs -m gpu tests/gpu/test_fastcall_gpu.py -p no:cacheprovider 2>&1 \
    | tee "$OUT/fastcall_tests.log"
  status=$(( status | ${PIPESTATUS[0]} ))
  timeout 150 python3 scripts/probe_host_cost.py --out "$OUT/host_cost.json" 2>&1 | tee "$OUT/host_cost.log"
  status=$(( status | ${PIPESTATUS[0]} ))
fi
if [[ "$what" == all || "$what" == bench ]]; then
  for suite in ${FINEGEMM_BENCH_SUITES:-dense grouped bf16}; do
    python3 -m finegemm bench "$suite" --num-tests "${FINEGEMM_BENCH_TESTS:-20}" --out "$OUT/$suite.json" 2>&1 \
      | tee "$OUT/bench_$suite.log"
    status=$(( status | ${PIPESTATUS[0]} ))
  done
  # The issues' targets from this run's JSON (suites not run here: the newest shipped results).
  targets_args=""
  for suite in ${FINEGEMM_BENCH_SUITES:-dense grouped bf16}; do targets_args="$targets_args --$suite $OUT/$suite.json"; done
  # shellcheck disable=SC2086
  python3 -m finegemm targets $targets_args --json "$OUT/targets.json" 2>&1 | tee "$OUT/targets.md"
  # Back-to-back GEMMs in CUDA graphs with programmatic dependent launch off / on (finegemm.set_pdl).
  python3 scripts/probe_pdl.py --out "$OUT/pdl.json" 2>&1 | tee "$OUT/probe_pdl.log"
  status=$(( status | ${PIPESTATUS[0]} ))
fi
exit $status
