"""The manager and the API use a runtime only through what ``runtime.base.Runtime`` declares, and both
runtimes offer all of it (no probing with ``getattr``)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from runtime.base import Runtime
from runtime.dryrun import DryRunRuntime
from runtime.spark.runtime import SparkRuntime

ROOT = Path(__file__).resolve().parents[2]


def declared() -> set[str]:
    members = {name for name, _ in inspect.getmembers(Runtime) if not name.startswith("_")}
    return members | set(Runtime.__annotations__)


def used_on_runtimes() -> dict[str, list[str]]:
    """Attribute name -> where ``<...>runtime.<name>`` is read in manager/ and api/."""
    used: dict[str, list[str]] = {}
    for package in ("manager", "api"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            decorators = {id(decorator) for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
                          for decorator in node.decorator_list}  # ``@runtime.setter`` is not a use
            for node in ast.walk(tree):
                if not isinstance(node, ast.Attribute) or id(node) in decorators:
                    continue
                owner = node.value
                name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                if name == "runtime":
                    used.setdefault(node.attr, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return used


def test_the_manager_and_the_api_use_only_what_the_interface_declares():
    used = used_on_runtimes()
    assert {"apply", "task_costs", "fragment_metrics", "defragment"} <= set(used)
    undeclared = {name: places for name, places in used.items() if name not in declared()}
    assert not undeclared, undeclared


def test_nobody_probes_a_runtime_with_getattr():
    probes = [f"{path.relative_to(ROOT)}:{node.lineno}"
              for package in ("manager", "api") for path in sorted((ROOT / package).rglob("*.py"))
              for node in ast.walk(ast.parse(path.read_text()))
              if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("getattr", "hasattr")
              and node.args and "runtime" in ast.unparse(node.args[0])]
    assert not probes, probes


def test_both_runtimes_offer_everything_declared():
    for implementation in (DryRunRuntime, SparkRuntime):
        missing = {name for name in declared() - {"kind"} if not callable(getattr(implementation, name, None))}
        assert not missing, (implementation.__name__, missing)
        assert isinstance(implementation.kind, str)
