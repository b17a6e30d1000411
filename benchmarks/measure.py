"""Measurement helpers: percentiles, CPU accounting (psutil, through runtime.costs), GC pauses, progress lines.

Linux only (reads ``/proc``). Nothing here imports the manager.
"""

from __future__ import annotations

import gc
import os
import platform
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from runtime.costs import process_cpu_s



def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation, as numpy's default.

    >>> percentile([1, 2, 3, 4], 50), percentile([5], 99)
    (2.5, 5.0)
    """
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values_ms: Sequence[float]) -> dict[str, float]:
    """count, mean, p50, p90, p99 and max of latencies in milliseconds, rounded to µs."""
    return {
        "count": len(values_ms),
        "mean": round(sum(values_ms) / len(values_ms), 3),
        "p50": round(percentile(values_ms, 50), 3),
        "p90": round(percentile(values_ms, 90), 3),
        "p99": round(percentile(values_ms, 99), 3),
        "max": round(max(values_ms), 3),
    }


# -- CPU accounting ---------------------------------------------------------------------


def _system_busy_s() -> tuple[float, float]:
    """(busy, total) CPU seconds over all CPUs since boot."""
    times = psutil.cpu_times()
    idle = times.idle + getattr(times, "iowait", 0.0)
    total = sum(times)
    return total - idle, total


def pytest_processes() -> int:
    """How many processes run pytest right now (the other engineer's test runs load the machine)."""
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"pytest" in command:
            count += 1
    return count


@dataclass
class CpuWindow:
    """CPU use between two instants, in cores (1.0 = one core busy the whole time).

    ``ours`` counts the benchmark process and the API server it started;
    ``redis`` the Redis server (shared with whoever else uses it); ``other``
    is everything else: load from outside the benchmark.
    """

    ours_pids: tuple[int, ...]
    redis_pid: int | None
    _start: tuple[float, float, float, float, float] = field(default=(0.0, 0.0, 0.0, 0.0, 0.0), repr=False)

    def __enter__(self) -> "CpuWindow":
        busy, total = _system_busy_s()
        ours = sum(process_cpu_s(pid) for pid in self.ours_pids)
        redis = process_cpu_s(self.redis_pid) if self.redis_pid else 0.0
        self._start = (time.monotonic(), busy, total, ours, redis)
        return self

    def __exit__(self, *exc: Any) -> None:
        wall0, busy0, total0, ours0, redis0 = self._start
        busy, total = _system_busy_s()
        ours = sum(process_cpu_s(pid) for pid in self.ours_pids)
        redis = process_cpu_s(self.redis_pid) if self.redis_pid else 0.0
        elapsed = max(time.monotonic() - wall0, 1e-9)
        self.result = {
            "seconds": round(elapsed, 3),
            "busy_cores": round((busy - busy0) / elapsed, 3),
            "ours_cores": round((ours - ours0) / elapsed, 3),
            "redis_cores": round((redis - redis0) / elapsed, 3),
        }
        self.result["other_cores"] = round(
            max(0.0, self.result["busy_cores"] - self.result["ours_cores"] - self.result["redis_cores"]), 3
        )
        self.result["loadavg_1m"] = os.getloadavg()[0]
        self.result["pytest_processes"] = pytest_processes()


# -- garbage collector pauses -------------------------------------------------------------


class GcWatch:
    """Records every collection of this process's cyclic GC: (generation, start, end)."""

    def __init__(self) -> None:
        self.events: list[tuple[int, float, float]] = []
        self._started: float | None = None

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._started = now
        elif self._started is not None:
            self.events.append((info["generation"], self._started, now))
            self._started = None

    def __enter__(self) -> "GcWatch":
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: Any) -> None:
        gc.callbacks.remove(self._callback)

    def during(self, spans: Iterable[tuple[float, float]]) -> dict[str, Any]:
        """Collections that overlapped the given (start, end) spans, by generation."""
        spans = list(spans)
        hit: dict[int, list[float]] = {}
        for generation, start, end in self.events:
            if any(start < span_end and end > span_start for span_start, span_end in spans):
                hit.setdefault(generation, []).append((end - start) * 1000)
        return {
            f"gen{generation}": {"count": len(pauses), "max_ms": round(max(pauses), 3), "total_ms": round(sum(pauses), 3)}
            for generation, pauses in sorted(hit.items())
        }


# -- progress and machine -----------------------------------------------------------------


class Progress:
    """Prints a status line at most every ``every`` seconds (and always when forced)."""

    def __init__(self, every: float = 5.0, out=None) -> None:
        """``out``: where lines go (default stdout; stderr where stdout carries a result)."""
        self.every = every
        self.out = out
        self.started = time.monotonic()
        self._last = 0.0

    def say(self, message: str, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last >= self.every:
            self._last = now
            print(f"[{now - self.started:7.1f}s] {message}", file=self.out or sys.stdout, flush=True)


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory_kb = int(line.split()[1])
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(memory_kb / 2**20, 1),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
    }
