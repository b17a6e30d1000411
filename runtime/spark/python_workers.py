"""Keep the code a Python worker imported out of its garbage collector's way.

PySpark's daemon runs every Python task of an executor (the ``sana_kafka``
source's reads, the keyed shuffles' ``mapInArrow`` functions, the writers) in
reused worker processes, and runs a full ``gc.collect()`` in the worker after
each task. A full collection visits every tracked object: once a worker has
imported Sana's operators (pydantic, pyarrow.compute, the operators' modules,
about 108,000 objects) it costs 60-75 ms. A micro-batch runs a Python task per
input slice and per keyed shuffle task, so on a trigger of a second that was
most of the Python workers' CPU (docs/runtime.md, "What a micro-batch costs").

:func:`freeze_imports`, called at the start of every Python task Sana runs,
moves what is alive at that point into the collector's permanent generation
(``gc.freeze()``) whenever the worker has imported modules since it last did:
the modules, their functions and classes. The collections after each task then
visit only what later tasks create. Frozen objects are still freed by
reference counting; only a reference cycle among them would never be
collected, and they are frozen a few times in a worker's life (each time a
task brought new imports), not per task.
"""

from __future__ import annotations

import gc
import sys

_modules_frozen = 0  # len(sys.modules) when this process last froze


def freeze_imports() -> None:
    """Freeze the objects alive now if modules were imported since the last freeze in this process."""
    global _modules_frozen
    if len(sys.modules) == _modules_frozen:
        return
    gc.collect()  # what is garbage already goes now, not into the permanent generation
    gc.freeze()
    _modules_frozen = len(sys.modules)
