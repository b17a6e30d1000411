"""The wait for a fresh JVM's JIT to settle before a benchmark measures (benchmarks/reuse_replay.py)."""

from __future__ import annotations

from benchmarks import reuse_replay


def test_jit_time_is_zero_without_a_jvm_and_settling_then_returns_after_one_window():
    import subprocess
    import time

    sleeper = subprocess.Popen(["sleep", "30"])  # a tree without a JVM (pytest's may hold Spark's)
    try:
        assert reuse_replay.jit_cpu_s(sleeper.pid) == 0.0
        began = time.monotonic()
        assert reuse_replay.settle_jit(sleeper.pid, quiet_cores=0.1, window_s=0.05, max_s=5.0) < 1.0
        assert time.monotonic() - began < 1.0
    finally:
        sleeper.kill()
        sleeper.wait()
