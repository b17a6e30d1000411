"""The service's CPU read from /proc keeps the time of processes that left its tree (real processes, no Spark)."""

from __future__ import annotations

import subprocess
import sys
import time
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


def test_an_orphaned_descendant_keeps_counting_after_it_leaves_the_tree():
    meter = ProcessTreeCpu()
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    grandchild = int(child.stdout.readline())
    before, stateless_before = meter(), process_tree_cpu_s()
    child.communicate(b"exit\n", timeout=30)  # the child exits; the grandchild starts burning, orphaned
    deadline = time.monotonic() + 60
    while Path(f"/proc/{grandchild}").exists() and Path(f"/proc/{grandchild}/stat").read_text().split(")")[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the grandchild did not finish"
        meter()
        time.sleep(0.1)
    after, stateless_after = meter(), process_tree_cpu_s()
    # The grandchild's time is counted once: it was never reaped by a process of this tree.
    assert after - before >= BURN_S * 0.8
    assert after - before < BURN_S * 3
    # What the stateless reading sees: the orphan left the tree with its time.
    assert stateless_after - stateless_before < BURN_S * 0.5


def test_a_reaped_child_is_counted_once():
    meter = ProcessTreeCpu()
    before = meter()
    burn = f"import time\nbegan = time.process_time()\nwhile time.process_time() - began < {BURN_S}: pass\n"
    child = subprocess.Popen([sys.executable, "-c", burn])
    while child.poll() is None:  # reaped here: its time moves into this process's children's time
        meter()
        time.sleep(0.1)
    spent = meter() - before
    assert BURN_S * 0.8 <= spent < BURN_S * 1.8
