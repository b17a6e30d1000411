"""A Python worker freezes what it imported, once per batch of new imports (runtime/spark/python_workers.py)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, json
from runtime.spark.python_workers import freeze_imports

import runtime.spark.worker_task, runtime.operators.window.worker  # what a keyed shuffle's task imports
freeze_imports()
first = gc.get_freeze_count()
freeze_imports()  # nothing imported since: nothing more frozen
again = gc.get_freeze_count()
import runtime.operators.join.worker  # a task of another operator brings new modules
freeze_imports()
print(json.dumps({"first": first, "again": again, "after_import": gc.get_freeze_count(),
                  "tracked": len(gc.get_objects())}))
"""


def _probe() -> dict:
    import json

    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_imported_objects_leave_the_collections_after_each_task():
    result = _probe()
    assert result["first"] > 10_000  # the modules' objects are frozen
    assert result["again"] == result["first"]  # a task without new imports freezes nothing
    assert result["after_import"] > result["first"]  # new imports are frozen too
    assert result["tracked"] < 1_000  # what a full collection still visits
