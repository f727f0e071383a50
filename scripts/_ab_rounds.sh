# Sourced by the A/B scripts (ab_probe_variants.sh, ab_bench_variants.sh): ab_rounds FN runs FN
# once per build variant per round, variants interleaved (A B A B ...), with LABEL, FLAGS (exported
# as FINEGEMM_EXTRA_NVCC_FLAGS for FN) and ROUND set; VARIANTS = "label=flags ...", ROUNDS
# (default 2). A variant's flags of the form "env:NAME=VALUE[,NAME=VALUE...]" set environment variables
# for FN instead of nvcc flags (host-side developer switches such as FINEGEMM_DIAG_TMAP_L2_PROMOTION_B,
# read once per process). Returns the OR of FN's exit codes.
: "${VARIANTS:?set VARIANTS to label=flags pairs, e.g. 'base= foo=-DFOO'}"
ab_rounds() {
  local status=0 v
  for ROUND in $(seq 1 "${ROUNDS:-2}"); do
    for v in $VARIANTS; do
      LABEL="${v%%=*}"; FLAGS="${v#*=}"
      echo "== round $ROUND $LABEL: $FLAGS"
      if [[ "$FLAGS" == env:* ]]; then
        ( IFS=','; for kv in ${FLAGS#env:}; do export "$kv"; done; FINEGEMM_EXTRA_NVCC_FLAGS="" "$1" )
      else
        FINEGEMM_EXTRA_NVCC_FLAGS="$FLAGS" "$1"
      fi
      status=$(( status | $? ))
    done
  done
  return $status
}
