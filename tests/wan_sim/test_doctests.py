"""The runnable examples in the docstrings of the WAN, optimizer and scheduler modules."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "wan.topology", "wan.monitor", "wan.flow", "wan.flow_index", "wan_sim.scenario", "wan_sim.policies", "wan_sim.simulate",
    "wan_sim.workloads", "planning.model", "optimizer.planner", "optimizer.contention", "optimizer.rates", "optimizer.views", "scheduler.placement", "scheduler.assignment",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
