# Sourced by the device scripts: run from the repo root with the package on PYTHONPATH, use the
# kernel cache carried from the CPU machine (.fgcache, built by scripts/precompile*.py with the
# same nvcc) when there is one, and write under $OUT.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [[ -z "${FINEGEMM_CACHE_DIR:-}" && -d .fgcache ]]; then export FINEGEMM_CACHE_DIR="$PWD/.fgcache"; fi
OUT="${OUT:-/tmp/finegemm-out}"; mkdir -p "$OUT"
