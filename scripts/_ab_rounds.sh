# Sourced by the A/B scripts (ab_probe_variants.sh, ab_bench_variants.sh): ab_rounds FN runs FN
# once per build variant per round, variants interleaved (A B A B ...), with LABEL, FLAGS (exported
# as FINEGEMM_EXTRA_NVCC_FLAGS for FN) and ROUND set; VARIANTS = "label=flags ...", ROUNDS
# (default 2). Returns the OR of FN's exit codes.
: "${VARIANTS:?set VARIANTS to label=flags pairs, e.g. 'base= foo=-DFOO'}"
ab_rounds() {
  local status=0 v
  for ROUND in $(seq 1 "${ROUNDS:-2}"); do
    for v in $VARIANTS; do
      LABEL="${v%%=*}"; FLAGS="${v#*=}"
      echo "== round $ROUND $LABEL: FINEGEMM_EXTRA_NVCC_FLAGS='$FLAGS'"
      FINEGEMM_EXTRA_NVCC_FLAGS="$FLAGS" "$1"
      status=$(( status | $? ))
    done
  done
  return $status
}
