"""Benchmarks: workload generators and measurement scripts (not part of the installed package)."""
