"""Benchmark suites behind `python -m finegemm bench <suite>` (need a CUDA GPU)."""
SUITES = ("dense", "grouped", "bf16")
