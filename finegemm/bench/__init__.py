"""Benchmark suites behind `python -m finegemm bench <suite>` (need a CUDA GPU)."""
SUITES = ("dense", "grouped", "bf16")
# Families of `python -m finegemm tune` (finegemm/bench/tune.py); the CLI and the tuner share the list.
TUNE_FAMILIES = ("dense", "wgrad", "masked", "contiguous", "k_grouped", "bf16", "bf16_masked", "bf16_contiguous")
