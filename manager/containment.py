"""Containment sharing: a new task reads a running task whose output holds what it needs.

Exact sharing reuses a running task with the same ancestor signature. Before
that lookup, :func:`contain` rewrites a submitted dataflow where a running task
reading the same stream *contains* a new one:

- a ``filter`` whose predicate implies a running filter's (decided by Z3,
  :mod:`runtime.operators.implication`) reads that filter's output and tests
  only the conjuncts the running predicate does not imply (its *residual*); an
  equivalent predicate reads the running filter as it is, with no task of its own;
- a ``select`` whose columns are computed from a running select's output
  (:mod:`runtime.operators.projection`) reads that output;
- a tumbling ``window_aggregate`` whose window is a multiple of a running
  one's (same keys, time column and watermark, aggregates derivable from its
  output) rolls it up (:func:`rolled_up`; docs/containment.md says when the
  results are the same). An ``avg`` is rolled up as a sum and a count, and a
  ``select`` after the roll-up window (``<task>~rollup``) divides them: the
  submitted task then runs as that select.

The rewritten dataflow holds the running task as a task of its own (id
``<task>~wider``), so the ordinary reuse lookup finds it by signature and the
dataflow becomes one of its users: the wider task then runs as long as a
dataflow reads it, whoever submitted it first. Removing the wider task's owner
therefore changes nothing for the narrower one (no restart, no gap); the cost
is the wider task's own work, one expression over the input the narrower task
would have read anyway. The residual's signature is that of what runs (the
residual over the wider task), so a later dataflow asking the same thing while
the same wider task runs shares it exactly.

The search is bounded: only tasks reading the same running task are
candidates, filters only if the columns they test are among the new
predicate's, and at most :data:`MAX_CHECKS` candidates per task (each solver
question within its time budget; answers are cached). Of the filters the new
one implies, the narrowest is read (the one implying the others, ties to the
smallest id); a residual equivalent to one already running over that filter
takes its predicate, so that the two share exactly.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from manager.model import Dataflow, Stream, Task
from manager.reuse import find_instance
from manager.signature import task_signature
from manager.state import ROLLUP, WIDER, State
from runtime.exceptions import OperatorConfigInvalid
from runtime.operators.fields import duration_ms
from runtime.operators.implication import implies, residual
from runtime.operators.keyed_options import RUNTIME_KEYS, without_runtime_keys
from runtime.operators.projection import rebase
from runtime.operators.relational import SELECT
from runtime.operators.sql import SqlProblem, parse_expression, referenced_columns
from runtime.operators.types import Schema
from runtime.operators.window import WINDOW_AGGREGATE, WINDOW_COLUMNS, aggregate_call
from runtime.plan import TaskSpec

#: Solver questions one new filter may ask (candidates past it are not looked at).
MAX_CHECKS = 8


@dataclass(frozen=True)
class Contained:
    """One containment share: submitted ``task`` reads running ``reads`` and runs ``residual`` (None: nothing);
    ``finish``, a select's config, when the residual is a roll-up window that a select completes (the task then
    runs as that select, after the window ``<task>~rollup``)."""

    task: str
    kind: str
    reads: str
    residual: dict[str, Any] | None
    finish: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        result = {"task": self.task, "kind": self.kind, "reads": self.reads, "residual": self.residual}
        if self.finish is not None:
            result["finish"] = self.finish
        return result


def contain(state: State, flow: Dataflow) -> tuple[Dataflow, tuple[Contained, ...]]:
    """``flow`` rewritten to read running tasks that contain its filters, selects and windows, and the shares found.

    >>> from manager.validate import parse_dataflow
    >>> def flow(name, expr): return parse_dataflow({"name": name, "tasks": [
    ...     {"id": "s", "type": "source", "config": {"topic": "in", "schema": {"temp": "double"}}},
    ...     {"id": "f", "type": "filter", "config": {"expr": expr}},
    ...     {"id": "k", "type": "sink", "config": {"topic": name}}],
    ...     "streams": [{"from": "s", "to": "f"}, {"from": "f", "to": "k"}]})
    >>> state = State()
    >>> state.add_task(TaskSpec("src", flow("a", "temp > 20").signatures["s"], "source", {}, None, (), "q", {"temp": "double"}), "d")
    >>> wide = flow("a", "temp > 20")
    >>> state.add_task(TaskSpec("f20", wide.signatures["f"], "filter", wide.tasks["f"].config, None, (("in", "src"),), "q",
    ...                         {"temp": "double"}), "d")
    >>> rewritten, shares = contain(state, flow("b", "temp > 30"))
    >>> [share.to_dict() for share in shares], [(s.src, s.dst) for s in rewritten.streams]
    ([{'task': 'f', 'kind': 'filter', 'reads': 'f20', 'residual': {'expr': 'temp > 30'}}], [('s', 'f~wider'), ('f~wider', 'f'), ('f', 'k')])
    """
    work = _Rewriting(flow)
    running: dict[str, str] = {}  # task -> the running task an exact lookup gives it
    shares: list[Contained] = []
    for task_id in flow.order:
        found = _exact(state, work, task_id, running)
        task, inputs = work.tasks[task_id], work.parents.get(task_id, [])
        if found is None and task.type in _CONTAINERS and len(inputs) == 1 and inputs[0][1] in running:
            match = _CONTAINERS[task.type](state, task, running[inputs[0][1]], flow.schemas[task_id])
            if match is not None and work.fits(task_id, match[0]):
                share = Contained(task_id, task.type, match[0].id, *match[1:])
                shares.append(share)
                work.apply(share, match[0])
                if share.residual is not None:
                    running[task_id + WIDER] = share.reads
                if share.finish is not None and (rollup := _exact(state, work, task_id + ROLLUP, running)) is not None:
                    running[task_id + ROLLUP] = rollup
                found = _exact(state, work, task_id, running)
        work.finish(task_id)
        if found is not None:
            running[task_id] = found
    if not shares:
        return flow, ()
    return work.result(), tuple(shares)


def rewrite(flow: Dataflow, contained: Mapping[str, Mapping[str, Any]], tasks: Mapping[str, TaskSpec]) -> Dataflow:
    """``flow`` as :func:`contain` rewrote it, given its recorded shares (``SubmittedDataflow.contained``) and the
    running tasks they read: what a submitted dataflow runs as, for checks that recompute the running set."""
    work = _Rewriting(flow)
    for task_id in flow.order:
        share = contained.get(task_id)
        if share is not None:
            work.apply(Contained(task_id, share["kind"], share["reads"], share["residual"], share.get("finish")),
                       tasks[share["reads"]])
        work.finish(task_id)
    return work.result()


def _exact(state: State, work: "_Rewriting", task_id: str, running: Mapping[str, str]) -> str | None:
    """The running task with ``task_id``'s signature (as rewritten so far) over its parents' running tasks."""
    inputs = work.parents.get(task_id, [])
    if not all(parent in running for _, parent in inputs):
        return None
    return find_instance(state, work.signature(task_id), tuple(sorted((port, running[parent]) for port, parent in inputs)))


class _Rewriting:
    """A dataflow being rewritten task by task, parents first: each task is final once :meth:`finish` names it."""

    def __init__(self, flow: Dataflow):
        self.flow = flow
        self.tasks = dict(flow.tasks)
        self.schemas = dict(flow.schemas)
        self.parents: dict[str, list[tuple[str, str]]] = {}
        for stream in flow.streams:
            self.parents.setdefault(stream.dst, []).append((stream.port, stream.src))
        self.signatures: dict[str, str] = {}
        self.order: list[str] = []
        self.rewritten: set[str] = set()  # tasks whose config, inputs or an ancestor changed

    def _as_submitted(self, task_id: str) -> bool:
        return task_id not in self.rewritten and task_id in self.flow.signatures and \
            not any(parent in self.rewritten for _, parent in self.parents.get(task_id, ()))

    def signature(self, task_id: str) -> str:
        if self._as_submitted(task_id):
            return self.flow.signatures[task_id]
        task = self.tasks[task_id]
        inputs = [(port, self.signatures[parent]) for port, parent in self.parents.get(task_id, [])]
        return task_signature(task.type, task.config, inputs, task.site if task.type == "source" else None)

    def fits(self, task_id: str, wider: TaskSpec) -> bool:
        """Whether ``wider`` reads what ``task_id`` reads (by signature)."""
        (port, parent), = self.parents[task_id]
        return task_signature(wider.type, wider.config, [(port, self.signatures[parent])]) == wider.signature

    def apply(self, share: Contained, wider: TaskSpec) -> None:
        """Make ``share.task`` read ``wider`` (through a task of its own, ``<task>~wider``) and run its residual,
        or, when equivalent, be ``wider``. With ``share.finish`` the residual runs as ``<task>~rollup`` and the
        task becomes the select that finishes it."""
        task = self.tasks[share.task]
        self.rewritten.add(share.task)
        if share.residual is None:
            self.tasks[share.task] = dataclasses.replace(task, config=wider.config)
            return
        wider_id = share.task + WIDER
        self.tasks[wider_id] = Task(wider_id, wider.type, wider.config)
        self.schemas[wider_id] = dict(wider.schema)
        self.parents[wider_id] = self.parents[share.task]
        port = self.parents[wider_id][0][0]
        self.parents[share.task] = [(port, wider_id)]
        self.tasks[share.task] = dataclasses.replace(task, config=share.residual)
        self.finish(wider_id)
        if share.finish is None:
            return
        rollup_id = share.task + ROLLUP
        self.tasks[rollup_id] = Task(rollup_id, task.type, share.residual)
        self.schemas[rollup_id] = WINDOW_AGGREGATE.output_schema(
            WINDOW_AGGREGATE.config_model.model_validate(share.residual), {"in": [dict(wider.schema)]})
        self.parents[rollup_id] = [(port, wider_id)]
        self.parents[share.task] = [("in", rollup_id)]
        self.tasks[share.task] = dataclasses.replace(task, type="select", config=share.finish)
        self.finish(rollup_id)

    def finish(self, task_id: str) -> None:
        if not self._as_submitted(task_id):
            self.rewritten.add(task_id)
        self.signatures[task_id] = self.signature(task_id)
        self.order.append(task_id)

    def result(self) -> Dataflow:
        streams = tuple(Stream(parent, task_id, port) for task_id in self.order for port, parent in self.parents.get(task_id, []))
        return dataclasses.replace(self.flow, tasks=self.tasks, streams=streams, order=tuple(self.order),
                                   schemas=self.schemas, signatures=self.signatures)


def _readers(state: State, parent: str, task_type: str) -> list[TaskSpec]:
    """Running, healthy tasks of ``task_type`` reading ``parent`` alone, by id."""
    found = [state.tasks[child] for child in state.children.get(parent, ())
             if state.tasks[child].type == task_type and child not in state.quarantined]
    return sorted((spec for spec in found if len(spec.inputs) == 1), key=lambda spec: spec.id)


def _filter_container(state: State, task: Task, parent: str, _: Schema) -> tuple[TaskSpec, dict[str, Any] | None, None] | None:
    """The narrowest running filter over ``parent`` that ``task``'s predicate implies, with the residual config."""
    schema = state.tasks[parent].schema
    expr = task.config["expr"]
    columns = _columns(expr)
    if columns is None:
        return None
    candidates = [spec for spec in _readers(state, parent, "filter")
                  if (theirs := _columns(spec.config["expr"])) is not None and theirs <= columns]
    implied = [spec for spec in candidates[:MAX_CHECKS] if implies(expr, spec.config["expr"], schema)]
    if not implied:
        return None
    narrowest = implied[0]
    for spec in implied[1:]:
        if implies(spec.config["expr"], narrowest.config["expr"], schema) and \
                not implies(narrowest.config["expr"], spec.config["expr"], schema):
            narrowest = spec
    rest = residual(expr, narrowest.config["expr"], schema)
    if rest is None:
        return narrowest, None, None
    return narrowest, {**task.config, "expr": _running_equivalent(state, narrowest.id, rest, schema)}, None


def _running_equivalent(state: State, wider: str, rest: str, schema: dict[str, str]) -> str:
    """``rest``, or the predicate of a running filter over ``wider`` equivalent to it (so that the residual is
    shared exactly: ``temp > 30`` and ``30 < temp AND temp > 20`` over ``temp > 20`` are one task)."""
    columns = _columns(rest)
    same = [spec for spec in _readers(state, wider, "filter") if _columns(spec.config["expr"]) == columns]
    for spec in same[:MAX_CHECKS]:
        theirs = spec.config["expr"]
        if implies(rest, theirs, schema) and implies(theirs, rest, schema):
            return theirs
    return rest


def _select_container(state: State, task: Task, parent: str, _: Schema) -> tuple[TaskSpec, dict[str, Any], None] | None:
    """The first running select over ``parent`` whose output ``task``'s columns can be computed from, among the
    first :data:`MAX_CHECKS` that read every input column ``task`` reads (a rebased expression reads the running
    select's columns only where it read theirs)."""
    schema = state.tasks[parent].schema
    reads = _select_columns(task.config["columns"])
    if reads is None:
        return None
    candidates = [spec for spec in _readers(state, parent, "select")
                  if (theirs := _select_columns(spec.config["columns"])) is not None and reads <= theirs]
    for spec in candidates[:MAX_CHECKS]:
        columns = rebase(task.config["columns"], spec.config["columns"], schema, spec.schema)
        if columns is not None:
            return spec, {**task.config, "columns": columns}, None
    return None


def _window_container(state: State, task: Task, parent: str,
                      output: Schema) -> tuple[TaskSpec, dict[str, Any], dict[str, Any] | None] | None:
    """The first running tumbling ``window_aggregate`` over ``parent`` that ``task`` rolls up: the same keys, time
    column and watermark, a window that divides ``task``'s window and, if ``task`` slides, its slide too, and every
    aggregate derivable from the running one's output (:func:`rolled_up`). The residual is a window aggregate over
    the running one's output with the new window (and slide), on ``window_start``, with a watermark delay of 1 ms
    (docs/containment.md says why that loses nothing and when the results equal the task's own); where an ``avg``
    is wanted, a select after it divides its sum by its count (the third value, its config; else None).

    A sliding window of W every S is the union of the running windows of g (g dividing W and S) that start in
    it: windows start at multiples of their slide, so each small window lies wholly inside or wholly outside."""
    config = task.config
    window_ms = duration_ms(config["window"])
    slide_ms = duration_ms(config["slide"]) if config.get("slide") else window_ms
    for spec in _readers(state, parent, "window_aggregate"):
        theirs = spec.config
        small_ms = duration_ms(theirs["window"])
        if (theirs.get("slide") not in (None, theirs["window"]) or theirs["keys"] != config["keys"]
                or theirs["time_column"] != config["time_column"] or theirs["watermark"] != config["watermark"]
                or window_ms % small_ms or slide_ms % small_ms):
            continue
        derived = rolled_up(config["aggregates"], theirs["aggregates"], [*config["keys"], *WINDOW_COLUMNS])
        if derived is None:
            continue
        aggregates, finish = derived
        rollup = {**without_runtime_keys(config), "time_column": "window_start", "watermark": "1 milliseconds",
                  "aggregates": aggregates}
        if slide_ms == window_ms:
            rollup.pop("slide", None)
        try:
            model = WINDOW_AGGREGATE.config_model.model_validate(rollup)
            rolled = WINDOW_AGGREGATE.output_schema(model, {"in": [spec.schema]})
            finishing = None if finish is None else SELECT.config_model.model_validate({"columns": finish})
            if (rolled if finishing is None else SELECT.output_schema(finishing, {"in": [rolled]})) != output:
                continue
        except (ValueError, OperatorConfigInvalid):
            continue
        tuning = {key: config[key] for key in RUNTIME_KEYS if key in config}  # the task's own workers, reshape
        residual = {**without_runtime_keys(model.model_dump(mode="json", by_alias=True)), **tuning}
        return spec, residual, None if finishing is None else finishing.model_dump(mode="json", by_alias=True)
    return None


def rolled_up(wanted: Mapping[str, str], running: Mapping[str, str],
              passed: Iterable[str] = ()) -> tuple[dict[str, str], dict[str, str] | None] | None:
    """Each wanted aggregate as one over the running aggregates' output columns, or None if one is not derivable:
    ``count`` and ``sum`` as sums of the running counts and sums, ``min`` and ``max`` as themselves, ``avg(x)`` as
    a sum of the running ``sum(x)`` and one of the running ``count(x)`` (``count(*)`` would count the nulls ``avg``
    skips). Second, when an ``avg`` is wanted, the select that finishes the roll-up: ``passed`` (the keys and window
    columns) as they are, each aggregate in order, an ``avg`` as its sum over its count (null for no value, as
    ``avg``); else None.

    >>> rolled_up({"n": "count(*)", "top": "max(t)"}, {"c": "count(*)", "hi": "max(t)"})
    ({'n': 'sum(c)', 'top': 'max(hi)'}, None)
    >>> rolled_up({"mean": "avg(t)"}, {"s": "sum(t)", "c": "count(t)"}, ["k"])
    ({'mean__sum': 'sum(s)', 'mean__count': 'sum(c)'}, {'k': 'k', 'mean': 'CASE WHEN mean__count > 0 THEN CAST(mean__sum AS DOUBLE) / mean__count END'})
    >>> rolled_up({"mean": "avg(t)"}, {"s": "sum(t)", "c": "count(*)"}) is None
    True
    """
    by_call = {aggregate_call(text): name for name, text in running.items()}
    derived: dict[str, str] = {}
    averages: dict[str, tuple[str, str]] = {}
    taken = {*wanted, *passed}
    for name, text in wanted.items():
        function, column = aggregate_call(text)
        if function == "avg":
            total, count = by_call.get(("sum", column)), by_call.get(("count", column))
            if total is None or count is None:
                return None
            hidden = (_unused(f"{name}__sum", taken), _unused(f"{name}__count", taken))
            derived.update({hidden[0]: f"sum({total})", hidden[1]: f"sum({count})"})
            averages[name] = hidden
            continue
        source = by_call.get((function, column))
        if source is None:
            return None
        derived[name] = f"{'sum' if function == 'count' else function}({source})"
    if not averages:
        return derived, None
    finish = {column: column for column in passed}
    for name in wanted:
        if name in averages:
            total, count = averages[name]
            finish[name] = f"CASE WHEN {count} > 0 THEN CAST({total} AS DOUBLE) / {count} END"
        else:
            finish[name] = name
    return derived, finish


def _unused(name: str, taken: set[str]) -> str:
    """``name``, or it with underscores added until it is not in ``taken``; then taken."""
    while name in taken:
        name += "_"
    taken.add(name)
    return name


_CONTAINERS = {"filter": _filter_container, "select": _select_container, "window_aggregate": _window_container}


@lru_cache(maxsize=65_536)
def _columns(expr: str) -> frozenset[str] | None:
    """The columns an expression reads (cached: every running filter or select over a stream is a candidate of each
    new one)."""
    try:
        return frozenset(referenced_columns(parse_expression(expr)))
    except SqlProblem:
        return None


def _select_columns(columns: Mapping[str, str]) -> frozenset[str] | None:
    """The input columns a select's expressions read (None if one does not parse)."""
    read: set[str] = set()
    for text in columns.values():
        found = _columns(text)
        if found is None:
            return None
        read |= found
    return frozenset(read)


def read_by_owner(state: State, owner: str | None, shares: Iterable[Contained]) -> frozenset[str]:
    """The running tasks ``shares`` read that a dataflow of ``owner`` runs as a task of its document (not only as
    the task a share of its reads): those an owner may be told about."""
    return frozenset(share.reads for share in shares if state.in_document_of(owner, share.reads))


def containment_shares(state: State) -> dict[str, int]:
    """Running containment shares by kind (``equivalent``: a predicate equal to a running one's, read as is)."""
    return dict(state.tally.contained)
