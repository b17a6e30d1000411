"""The packages form floors, and every import points down (docs/architecture.md, "Layers").

From the ground up:

- ``sana``: settings, the root error, principals; imports none of the others;
- ``wan`` (the WAN model) and ``runtime`` (operators, Kafka, Spark): beside
  each other, neither knows the other;
- ``planning``: the vocabulary the optimizer and the scheduler share;
- ``scheduler`` (where each vertex runs), then ``optimizer`` (which shares a
  query may take; it calls the scheduler);
- ``manager``, then ``api``;
- ``wan_sim`` and ``benchmarks`` at the top: they use everything, nothing
  in the service imports them.

A module may import its own package and any package on a lower floor; nothing
else, with no exception listed here. Imports inside functions and under
``TYPE_CHECKING`` count: they are arrows all the same. Two more rules: no
import loop between modules anywhere, and no module touching another file's
private names (``x._name`` where ``_name`` is defined in another module of
the project).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS: dict[str, int] = {
    "sana": 0,
    "wan": 1, "runtime": 1,
    "planning": 2,
    "scheduler": 3,
    "optimizer": 4,
    "manager": 5,
    "api": 6,
    "wan_sim": 7,
    "benchmarks": 8,
}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    return {module_name(path, root): path for package in FLOORS for path in sorted((root / package).rglob("*.py"))}


def imported(path: Path, name: str, known: Iterable[str]) -> set[str]:
    """The project modules ``path`` (module ``name``) imports, anywhere in the file."""
    known = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            while target and target not in known:  # ``from pkg import name``: the module, or the package
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = project_modules(root)
    return {name: imported(path, name, modules) for name, path in modules.items()}


def climbs(graph: Mapping[str, set[str]]) -> list[str]:
    wrong = []
    for source, targets in graph.items():
        own = source.split(".")[0]
        for target in targets:
            other = target.split(".")[0]
            if other != own and FLOORS[other] >= FLOORS[own]:
                wrong.append(f"{source} imports {target} ({other} is not below {own})")
    return sorted(wrong)


def loops(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def private_reaches(root: Path = ROOT) -> list[str]:
    """``x._name`` and ``from m import _name`` where ``_name`` is defined in another module, not this one."""
    trees = {name: ast.parse(path.read_text(), str(path)) for name, path in project_modules(root).items()}
    defined: dict[str, set[str]] = {}
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.setdefault(node.name, set()).add(name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                defined.setdefault(node.attr, set()).add(name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.setdefault(node.id, set()).add(name)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                defined.setdefault(node.target.id, set()).add(name)
    reaches = []
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    continue
                homes = defined.get(node.attr, set())
                if homes and name not in homes:  # a name of ours (not a library's), defined elsewhere
                    reaches.append(f"{name}:{node.lineno} reaches {node.attr} of {sorted(homes)}")
            elif isinstance(node, ast.ImportFrom):
                reaches += [f"{name}:{node.lineno} imports {node.module}.{alias.name}"
                            for alias in node.names if _private(alias.name)]
    return sorted(reaches)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_every_package_is_on_a_floor():
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages == set(FLOORS), "a new top-level package needs a floor in FLOORS (and in docs/architecture.md)"


def test_every_import_points_down(graph):
    assert graph and not climbs(graph), climbs(graph)


def test_no_import_loops(graph):
    assert not loops(graph), loops(graph)


def test_no_module_touches_another_files_private_names():
    assert not private_reaches(), private_reaches()


def test_the_checks_see_a_climb_a_loop_and_a_private_reach(tmp_path):
    for package in FLOORS:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "wan" / "monitor.py").write_text("def _spare():\n    return 1\n")
    (tmp_path / "scheduler" / "place.py").write_text("from optimizer.plan import admit\nimport wan.monitor\n"
                                                      "wan.monitor._spare()\n")
    (tmp_path / "optimizer" / "plan.py").write_text("def admit():\n    from scheduler.place import spare\n")
    (tmp_path / "runtime" / "a.py").write_text("from . import b\n")
    (tmp_path / "runtime" / "b.py").write_text("from runtime.a import x\n")
    graph = import_graph(tmp_path)
    assert graph["scheduler.place"] == {"optimizer.plan", "wan.monitor"}
    assert climbs(graph) == ["scheduler.place imports optimizer.plan (optimizer is not below scheduler)"]
    assert graph["runtime.a"] == {"runtime", "runtime.b"}  # the package's __init__ runs too
    assert loops(graph) == [["optimizer.plan", "scheduler.place"], ["runtime.a", "runtime.b"]]
    assert private_reaches(tmp_path) == ["scheduler.place:3 reaches _spare of ['wan.monitor']"]
