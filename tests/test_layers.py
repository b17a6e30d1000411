"""Data flows one way (DESIGN.md): api -> manager -> optimizer -> scheduler -> runtime.

No module imports a package of a layer above its own. The one exception is
the vocabulary the optimizer hands the scheduler (``optimizer.model``: the
query, the admissions, the plan; ``optimizer.exceptions``). ``wan_sim`` feeds
bandwidth to the optimizer and the scheduler and runs their stages in the
simulator; of the manager it uses only the ancestor signatures (the same
equivalence), and it never reaches the API or Spark.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["api", "manager", "optimizer", "scheduler", "runtime"]
VOCABULARY = {"optimizer.model", "optimizer.exceptions"}


def imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", LAYERS)
def test_no_layer_imports_a_layer_above_it(package: str) -> None:
    above = LAYERS[:LAYERS.index(package)]
    climbs = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in modules(package)
        for line, name in imports(path)
        if name.split(".")[0] in above and name not in VOCABULARY
    ]
    assert modules(package) and not climbs, climbs


def test_wan_sim_never_reaches_the_manager_the_api_or_spark() -> None:
    reached = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in modules("wan_sim")
        for line, name in imports(path)
        if (name.split(".")[0] in ("manager", "api", "pyspark") and name != "manager.signature")
        or name.startswith("runtime.spark")
    ]
    assert not reached, reached


def test_the_check_sees_a_climb(tmp_path: Path) -> None:
    module = tmp_path / "climber.py"
    module.write_text("import os\nfrom manager.state import State\nfrom optimizer.model import QueryTask\n")
    assert [name for _, name in imports(module)] == ["os", "manager.state", "optimizer.model"]
