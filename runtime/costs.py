"""What each running task costs, measured: CPU, Kafka bytes written, state.

The Spark runtime keeps cumulative counters per query (time spent in its
micro-batches) and per task (records and bytes its outputs wrote, rows and
bytes of its keyed state). A :class:`CostMeter` samples them, with the CPU
time of the service's process tree (psutil), every few seconds,
and turns the last window of samples into rates per task:

- ``cpu_cores``: the service's measured CPU over the window (cores), split
  among queries by their share of micro-batch time, and within a query
  equally among the tasks it runs (a query is one Spark plan: the split
  inside it is not observable without instrumenting every operator);
- ``kafka_bytes_per_s`` and ``kafka_records_per_s``: what the task's sink or
  taps wrote (value bytes), as measured on the writes;
- ``state_bytes``: the task's keyed state now (Arrow bytes of its workers'
  state tables).

The CPU of all tasks adds up to the process tree's CPU whenever a batch ran
in the window; :func:`manager.costs.attribute` splits task costs among
dataflows. Records written by executors (a cluster master) are not counted
by the driver: ``kafka_bytes_per_s`` is then ``None``.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

WINDOW_S = 30.0
SAMPLE_EVERY_S = 5.0


# -- CPU of processes (the one place that reads it; psutil reads /proc on Linux) -----------------

def process_cpu_s(pid: int | None = None) -> float:
    """CPU seconds (user + system, all threads, not its children's) used so far by ``pid`` (default: this
    process); 0.0 once it is gone.

    >>> process_cpu_s() > 0
    True
    """
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


def thread_cpu_s(pid: int) -> dict[int, float]:
    """Thread id -> CPU seconds (user + system) of every thread of ``pid``; empty once it is gone."""
    try:
        return {thread.id: thread.user_time + thread.system_time for thread in psutil.Process(pid).threads()}
    except psutil.Error:
        return {}


def process_tree_cpu_s(root: int | None = None) -> float:
    """CPU seconds (user + system) used so far by ``root`` (default: this process) and its descendants.

    The time of children that exited and were reaped counts in their parent's;
    the time of a process whose parent exited first does not (it left the
    tree): :class:`ProcessTreeCpu` keeps it.

    >>> process_tree_cpu_s() > 0
    True
    """
    cpu: dict[int, float] = {}
    tree = process_tree(os.getpid() if root is None else root, cpu)
    return sum(cpu.get(pid, 0.0) for pid in tree)


class ProcessTreeCpu:
    """CPU seconds used so far by ``root`` (default: this process) and every process that ever descended from it.

    :func:`process_tree_cpu_s` finds the tree through parent pids, so it loses a
    process whose parent exits first: the orphan is adopted by init, leaves
    the tree with all its CPU time and any of its reaped children's, and the
    total falls (the Spark JVM's exit took its Python daemons, a few hundred
    CPU seconds, out of the tree in one 5 s slice). This reader keeps state
    between calls:

    - a process seen in the tree stays a member after it is reparented (kept by
      pid and start time, so a reused pid is not mistaken for it);
    - when a member disappears, its last reading is kept, unless its parent
      at the last reading is still a member and waits for its children: then
      the kernel moved the member's time into that parent's reaped-children
      time. A parent that ignores ``SIGCHLD`` does not wait: the kernel reaps
      its children and their time goes nowhere. PySpark's worker daemons do
      that, so every Python worker that exits would take all its CPU time
      out of the total (and a parent that exits in the same reading as its
      child may not have waited for it either).

    Time a process used between the last reading and its exit is still lost
    when nobody waits for it, so read often (the benchmarks read every 5 s).
    A child that a parent waited for and that parent's exit, both between
    two readings, count the child's last reading twice.

    >>> cpu = ProcessTreeCpu()
    >>> first = cpu()
    >>> first > 0 and cpu() >= first
    True
    """

    def __init__(self, root: int | None = None) -> None:
        self.root = os.getpid() if root is None else root
        self._members: dict[tuple[int, float], tuple[int, float]] = {}  # (pid, start) -> (parent pid, CPU s)
        self._departed_s = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        table = _process_table()  # pid -> (parent pid, start, CPU s)
        with self._lock:
            surviving = {pid for pid, start in self._members if table.get(pid, (0, -1.0, 0.0))[1] == start}
            members = _descendants({pid: row[0] for pid, row in table.items()}, surviving | {self.root})
            for (pid, start), (parent, used_s) in self._members.items():
                if pid in surviving:
                    continue
                if parent in members and not _ignores_children(parent):
                    continue  # its parent waited for it: its time is in the parent's reaped-children time
                self._departed_s += used_s  # reaped by init or by the kernel: its time is nowhere else
            self._members = {(pid, table[pid][1]): (table[pid][0], table[pid][2]) for pid in members if pid in table}
            return sum(used_s for _, used_s in self._members.values()) + self._departed_s


SIGCHLD_BIT = 1 << (signal.SIGCHLD - 1)


def _ignores_children(pid: int) -> bool:
    """Whether ``pid`` ignores ``SIGCHLD`` (``SigIgn`` in ``/proc/<pid>/status``, which psutil does not read): its
    children are reaped by the kernel, and their CPU time is not added to its reaped-children time."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & SIGCHLD_BIT)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _process_table() -> dict[int, tuple[int, float, float]]:
    """pid -> (parent pid, start time, CPU seconds with its reaped children's) for every process we may read."""
    table = {}
    for process in psutil.process_iter(["ppid", "create_time", "cpu_times"]):
        parent, start, times = process.info["ppid"], process.info["create_time"], process.info["cpu_times"]
        if parent is None or start is None or times is None:  # gone meanwhile, or not ours to read
            continue
        table[process.pid] = (parent, start, times.user + times.system + times.children_user + times.children_system)
    return table


def _descendants(parents: Mapping[int, int], starts: set[int]) -> set[int]:
    """``starts`` and all their descendants in ``parents`` (pid -> parent pid) that are alive."""
    tree = {pid for pid in starts if pid in parents}
    frontier = list(tree)
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    while frontier:
        for pid in children.get(frontier.pop(), ()):
            if pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return tree


def process_tree(root: int, cpu: dict[int, float] | None = None) -> set[int]:
    """``root`` and its live descendants, found through their parent pids.

    ``cpu``, when given, receives every process's CPU seconds (user, system and its reaped children's).

    >>> os.getpid() in process_tree(os.getpid())
    True
    """
    table = _process_table()
    if cpu is not None:
        cpu.update((pid, row[2]) for pid, row in table.items())
    return _descendants({pid: row[0] for pid, row in table.items()}, {root}) | {root}


@dataclass(frozen=True)
class QueryCounters:
    """Cumulative counters of one query at one instant."""

    busy_ms: float
    tasks: tuple[str, ...]
    written_bytes: Mapping[str, int] = field(default_factory=dict)
    written_records: Mapping[str, int] = field(default_factory=dict)
    state_bytes: Mapping[str, int] = field(default_factory=dict)
    counts_writes: bool = True


@dataclass(frozen=True)
class Sample:
    at: float
    cpu_s: float
    queries: Mapping[str, QueryCounters]


def task_costs(first: Sample, last: Sample) -> dict[str, Any]:
    """Rates per task between two samples (see the module docstring).

    >>> a = Sample(0.0, 10.0, {"q1": QueryCounters(0.0, ("s", "f")), "q2": QueryCounters(0.0, ("k",))})
    >>> b = Sample(10.0, 25.0, {"q1": QueryCounters(3000.0, ("s", "f"), {"f": 5000}),
    ...                         "q2": QueryCounters(1000.0, ("k",), {}, {}, {"k": 64})})
    >>> costs = task_costs(a, b)
    >>> costs["cpu_cores"], costs["tasks"]["f"]["cpu_cores"], costs["tasks"]["k"]["cpu_cores"]
    (1.5, 0.5625, 0.375)
    >>> costs["tasks"]["f"]["kafka_bytes_per_s"], costs["tasks"]["k"]["state_bytes"]
    (500.0, 64)
    """
    seconds = max(last.at - first.at, 1e-9)
    cores = max(last.cpu_s - first.cpu_s, 0.0) / seconds
    busy = {}
    for query_id, now in last.queries.items():
        before = first.queries.get(query_id)
        busy[query_id] = max(now.busy_ms - (before.busy_ms if before else 0.0), 0.0)
    total_busy = sum(busy.values())
    tasks: dict[str, dict[str, Any]] = {}
    for query_id, now in last.queries.items():
        before = first.queries.get(query_id) or QueryCounters(0.0, ())
        share = cores * busy[query_id] / total_busy if total_busy else 0.0
        for task_id in now.tasks:
            written = now.written_bytes.get(task_id, 0) - before.written_bytes.get(task_id, 0)
            records = now.written_records.get(task_id, 0) - before.written_records.get(task_id, 0)
            tasks[task_id] = {
                "query": query_id,
                "cpu_cores": share / len(now.tasks),
                "kafka_bytes_per_s": max(written, 0) / seconds if now.counts_writes else None,
                "kafka_records_per_s": max(records, 0) / seconds if now.counts_writes else None,
                "state_bytes": int(now.state_bytes.get(task_id, 0)),
            }
    return {
        "window_s": round(seconds, 3),
        "cpu_cores": cores,
        "attributed_cpu_cores": cores if total_busy else 0.0,
        "tasks": tasks,
    }


class CostMeter:
    """Samples counters every ``every_s`` and keeps ``window_s`` of samples; thread-safe."""

    def __init__(self, read: Callable[[], Mapping[str, QueryCounters]], window_s: float = WINDOW_S,
                 every_s: float = SAMPLE_EVERY_S, cpu: Callable[[], float] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.read = read
        self.window_s = window_s
        self.every_s = every_s
        self.cpu = cpu or ProcessTreeCpu()
        self.clock = clock
        self._samples: deque[Sample] = deque()
        self._lock = threading.Lock()

    def due(self) -> bool:
        with self._lock:
            return not self._samples or self.clock() - self._samples[-1].at >= self.every_s

    def sample(self) -> None:
        sample = Sample(self.clock(), self.cpu(), dict(self.read()))
        with self._lock:
            self._samples.append(sample)
            while len(self._samples) > 2 and sample.at - self._samples[1].at >= self.window_s:
                self._samples.popleft()

    def costs(self) -> dict[str, Any]:
        """Rates over the window (``measured`` is False until two samples exist)."""
        with self._lock:
            samples = list(self._samples)
        if len(samples) < 2:
            return {"measured": False, "window_s": 0.0, "cpu_cores": 0.0, "attributed_cpu_cores": 0.0, "tasks": {}}
        return {"measured": True, **task_costs(samples[0], samples[-1])}
