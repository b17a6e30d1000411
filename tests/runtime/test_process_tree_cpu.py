"""The service's CPU read from /proc keeps the time of processes that left its tree (real processes, no Spark).

Each test reads the tree of a root process of its own, not the test
process's: by the time these tests run, the test process also holds a Spark
JVM whose background threads would count.
"""

from __future__ import annotations

import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from runtime.costs import ProcessTreeCpu, process_tree_cpu_s

BURN_S = 1.5

# The child starts a grandchild that burns CPU, prints its pid and exits when told to: the grandchild is
# orphaned (adopted by init, as the Spark JVM's Python daemons are when the JVM exits) and burns on.
CHILD = f"""
import subprocess, sys
burn = "import time\\nbegan = time.process_time()\\nwhile time.process_time() - began < {BURN_S}: pass\\n"
grandchild = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline()\\n" + burn],
                              stdin=subprocess.PIPE)
print(grandchild.pid, flush=True)
sys.stdin.readline()
grandchild.stdin.write(b"go\\n")
grandchild.stdin.flush()
"""


# The root starts the child, reports the grandchild's pid, and on "go" lets the child exit (and reaps it).
ROOT = f"""
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", {CHILD!r}], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
print(child.stdout.readline().decode().strip(), flush=True)
sys.stdin.readline()
child.communicate(b"exit\\n", timeout=30)
print("done", flush=True)
sys.stdin.readline()
"""
BURN = f"import time\nbegan = time.process_time()\nwhile time.process_time() - began < {BURN_S}: pass\n"
# The root runs a child that burns CPU and reaps it: the child's time moves into the root's children's time.
REAPER = f"""
import subprocess, sys
sys.stdin.readline()
subprocess.run([sys.executable, "-c", {BURN!r}], check=True)
print("done", flush=True)
sys.stdin.readline()
"""

# The root ignores SIGCHLD, as PySpark's worker daemon does, and forks a child that burns CPU: the kernel reaps
# the child, and its time is not added to the root's children's time.
DAEMON = f"""
import os, signal, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
sys.stdin.readline()
child = os.fork()
if child == 0:
    exec({BURN!r})
    os._exit(0)
print(child, flush=True)
sys.stdin.readline()
"""


def _finished(pid: int) -> bool:
    path = Path(f"/proc/{pid}/stat")
    try:
        return path.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


@contextmanager
def _root(script: str) -> Iterator[subprocess.Popen]:
    """A root process running ``script`` (its own tree to read), told to quit and waited for at the end."""
    root = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        yield root
    finally:
        root.communicate(b"quit\n", timeout=30)


def _go(root: subprocess.Popen) -> None:
    root.stdin.write(b"go\n")
    root.stdin.flush()


def _read_until_finished(pid: int, meter: ProcessTreeCpu) -> list[float]:
    """Read ``meter`` every 0.1 s while ``pid`` burns (so it sees the process in the tree); the readings."""
    deadline = time.monotonic() + 60
    readings = []
    while not _finished(pid):
        assert time.monotonic() < deadline, f"process {pid} did not finish"
        readings.append(meter())
        time.sleep(0.1)
    return readings


def test_an_orphaned_descendant_keeps_counting_after_it_leaves_the_tree():
    with _root(ROOT) as root:
        meter = ProcessTreeCpu(root.pid)
        grandchild = int(root.stdout.readline())
        before, stateless_before = meter(), process_tree_cpu_s(root.pid)
        _go(root)
        assert root.stdout.readline().strip() == b"done"  # the child exited; the grandchild burns on, orphaned
        _read_until_finished(grandchild, meter)
        after, stateless_after = meter(), process_tree_cpu_s(root.pid)
    # The grandchild's time is counted once: it was never reaped by a process of this tree.
    assert BURN_S * 0.8 <= after - before < BURN_S * 2
    # What the stateless reading sees: the orphan left the tree with its time.
    assert stateless_after - stateless_before < BURN_S * 0.5


def test_a_reaped_child_is_counted_once():
    with _root(REAPER) as root:
        meter = ProcessTreeCpu(root.pid)
        before = meter()
        _go(root)
        deadline = time.monotonic() + 60
        while not select.select([root.stdout], [], [], 0.1)[0]:  # the child burns; the meter sees it in the tree
            assert time.monotonic() < deadline, "the child did not finish"
            meter()
        assert root.stdout.readline().strip() == b"done"
        spent = meter() - before
    assert BURN_S * 0.8 <= spent < BURN_S * 1.8


def test_a_child_the_kernel_reaped_keeps_counting():
    """PySpark's daemons ignore SIGCHLD, so a Python worker's time is nowhere once it exits: the meter keeps its
    last reading. Before, every exited worker took all its CPU time out of the service's total."""
    with _root(DAEMON) as root:
        meter = ProcessTreeCpu(root.pid)
        before = meter()
        _go(root)
        readings = _read_until_finished(int(root.stdout.readline()), meter)
        spent = meter() - before
    assert readings and readings[-1] - before > BURN_S * 0.5  # it was seen burning
    assert BURN_S * 0.8 <= spent < BURN_S * 1.8  # and its time stays after the kernel reaped it
