"""The runnable examples in the docstrings of the manager's modules."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["manager.merge", "manager.group", "manager.reuse", "manager.traffic", "manager.signature", "manager.validate", "manager.costs", "scheduler.fragments",
           "runtime.costs", "api.cli", "runtime.operators.sql",
           "sana.auth", "manager.status", "runtime.quarantine", "manager.containment"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
