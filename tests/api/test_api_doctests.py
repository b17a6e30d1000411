"""The runnable examples in the docstrings of the API's guard, budgets and error answers."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["api.loopback", "api.guard", "api.ratelimit", "api.error_answers", "api.retention", "api.collector"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
