"""Submit/remove traces of the reuse paper's evaluation (section 5.1; docs/reuse.md, "Traces").

A trace is a list of steps ``("add", i)`` or ``("remove", i)`` over dataflows
``0 .. n-1`` of a workload. Every trace obeys the paper's rules: a running
dataflow is never added again while it runs, only running dataflows are
removed, and the trace ends with nothing running.

- :func:`sequential` (SEQ): add every dataflow once in random order, then
  remove them all in random order (2n steps).
- :func:`random_walk` (RW): add ``initial`` dataflows chosen at random, one per
  step; then ``steps`` steps, each an add (of one not running) or a remove (of
  one running) with equal probability; then remove what still runs, in random
  order. When the walk picks an add with everything running, or a remove with
  nothing running, it does the other action instead.

RW1 and RW2 of the paper are two random walks with different seeds.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

Step = tuple[str, int]


def sequential(n: int, seed: int = 0) -> list[Step]:
    """Add all ``n`` dataflows one at a time in random order, then remove them in random order.

    >>> trace = sequential(3, seed=1)
    >>> [action for action, _ in trace], sorted(i for action, i in trace if action == "add")
    (['add', 'add', 'add', 'remove', 'remove', 'remove'], [0, 1, 2])
    """
    rng = random.Random(seed)
    adds = rng.sample(range(n), n)
    removes = rng.sample(range(n), n)
    return [("add", i) for i in adds] + [("remove", i) for i in removes]


def random_walk(n: int, initial: int, steps: int = 100, seed: int = 0) -> list[Step]:
    """Fill with ``initial`` random dataflows, walk ``steps`` random adds/removes, then drain.

    >>> trace = random_walk(5, initial=3, steps=4, seed=2)
    >>> trace
    [('add', 0), ('add', 4), ('add', 3), ('add', 1), ('remove', 3), ('add', 2), ('remove', 4), ('remove', 0), ('remove', 2), ('remove', 1)]
    >>> len(trace) == 3 + 4 + len(running_after(trace[:7]))
    True
    """
    if not 0 <= initial <= n:
        raise ValueError(f"initial must be in 0..{n}, got {initial}")
    rng = random.Random(seed)
    running = rng.sample(range(n), initial)
    trace: list[Step] = [("add", i) for i in running]
    idle = sorted(set(range(n)) - set(running))
    for _ in range(steps):
        add = rng.random() < 0.5
        if (add and not idle) or (not add and not running):
            add = not add
        if add:
            chosen = idle.pop(rng.randrange(len(idle)))
            running.append(chosen)
            trace.append(("add", chosen))
        else:
            chosen = running.pop(rng.randrange(len(running)))
            idle.append(chosen)
            trace.append(("remove", chosen))
    rng.shuffle(running)
    trace += [("remove", i) for i in running]
    return trace


def running_after(trace: Sequence[Step]) -> set[int]:
    """The dataflows running after ``trace``; raises ``ValueError`` at the first step that breaks a rule.

    >>> running_after([("add", 1), ("add", 0), ("remove", 1)])
    {0}
    >>> running_after([("add", 1), ("add", 1)])
    Traceback (most recent call last):
    ...
    ValueError: step 1: ('add', 1) adds a running dataflow
    """
    running: set[int] = set()
    for number, (action, i) in enumerate(trace):
        if action == "add":
            if i in running:
                raise ValueError(f"step {number}: {(action, i)} adds a running dataflow")
            running.add(i)
        elif action == "remove":
            if i not in running:
                raise ValueError(f"step {number}: {(action, i)} removes a dataflow that is not running")
            running.discard(i)
        else:
            raise ValueError(f"step {number}: unknown action {action!r}")
    return running
