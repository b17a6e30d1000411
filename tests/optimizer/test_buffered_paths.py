"""The buffered model's size follows the paths data takes, not the number of tasks (wan/buffered.py).

Many dataflows of the same shape over the same sites are one group per source and path: a plan weighed behind a
congested link solves links, however many tasks sit behind it.
"""

from __future__ import annotations

import math
import random

from optimizer.contention import Contention
from planning.model import QueryPlan, RunningTask
from wan.buffered import RECOUNT_EVERY
from wan.flow_index import FlowIndex
from wan.monitor import WanMonitor
from wan.topology import parse_wan_config

SITES = ("x", "y", "z")
CONFIG = parse_wan_config({"sites": list(SITES), "links": [
    {"from": "x", "to": "y", "bandwidth_mbps": 10, "latency_ms": 5},
    {"from": "y", "to": "z", "bandwidth_mbps": 4, "latency_ms": 5},
    {"from": "x", "to": "z", "bandwidth_mbps": 50, "latency_ms": 5},
    {"from": "z", "to": "y", "bandwidth_mbps": 3, "latency_ms": 5}]})


def chain(number: int, source: str) -> list[RunningTask]:
    """A filter at y over the shared source, a sink at z over it, and a sink at y over the source."""
    return [RunningTask(f"f{number}", f"F{number}", "filter", "y", (("in", source),), 4.0),
            RunningTask(f"k{number}", f"K{number}", "sink", "z", (("in", f"f{number}"),), 4.0),
            RunningTask(f"j{number}", f"J{number}", "sink", "y", (("in", source),), 8.0)]


def fill(count: int) -> tuple[FlowIndex, list[RunningTask]]:
    index, running = FlowIndex(), [RunningTask("s", "S", "source", "x", (), 8.0)]
    for number in range(count):
        running += chain(number, "s")
    for task in running:
        index.add(task.id, task.site, [parent for _, parent in task.inputs], task.rate_mbps)
    return index, running


def test_many_dataflows_of_one_shape_are_one_group_per_path():
    monitor = WanMonitor(CONFIG)
    one, _ = fill(1)
    many, running = fill(300)
    groups = {link: set(weights) for link, weights in one.paths().links.items()}
    assert groups == {link: set(weights) for link, weights in many.paths().links.items()}
    assert set(one.paths().sinks) == set(many.paths().sinks) == {("s", (("x", "y"),)), ("s", (("x", "y"), ("y", "z")))}
    expected = Contention(running, monitor, router=True, buffered=True).delivered((), QueryPlan({}))
    assert math.isclose(many.delivered_buffered((), monitor.capacity), expected, rel_tol=1e-9)


def test_a_total_kept_over_thousands_of_changes_equals_one_summed_again():
    """Past :data:`wan.buffered.RECOUNT_EVERY` changes the sinks' total has been summed again at least once; kept
    by differences in between, it agrees with an index built once at the end."""
    monitor = WanMonitor(CONFIG)
    index = FlowIndex()
    index.add("s", "x", (), 8.0)
    index.delivered_buffered((), monitor.capacity)
    chosen = random.Random(7)
    alive: list[int] = []
    changes = 0
    for number in range(900):
        for task in chain(number, "s"):
            index.add(task.id, chosen.choice(SITES) if task.type == "sink" else task.site,
                      [parent for _, parent in task.inputs], task.rate_mbps)
            changes += 1
        alive.append(number)
        if chosen.random() < 0.45:
            gone = alive.pop(chosen.randrange(len(alive)))
            for task_id in (f"k{gone}", f"j{gone}", f"f{gone}"):
                index.drop(task_id)
                changes += 1
    assert changes > 2 * RECOUNT_EVERY
    again = FlowIndex()
    for task_id in index.sites:
        again.add(task_id, index.sites[task_id], index.inputs[task_id], index.rates[task_id])
    assert math.isclose(index.delivered_buffered((), monitor.capacity),
                        again.delivered_buffered((), monitor.capacity), rel_tol=1e-9)
