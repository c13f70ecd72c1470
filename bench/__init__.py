"""Benchmarks: ratios against baselines measured in the same run (not timed tests)."""
