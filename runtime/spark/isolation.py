"""Isolation: one task's run-time failure is not its query's, nor the other dataflows'.

A batch that fails is probed: each output evaluated alone, then the tasks behind
the failing ones, parents first, so the task whose expression fails is named.
It is quarantined (:mod:`runtime.quarantine`) and the same micro-batch is
evaluated again without it and whatever reads it; the query's other dataflows
lose nothing and wait one evaluation. An error no task explains (the broker
down, a lost executor) fails the query, and the supervisor restarts it from its
checkpoint.

:class:`Isolation` is part of :class:`~runtime.spark.fragment.FragmentQuery`;
it evaluates through :meth:`~runtime.spark.statement.Statement.evaluate` and
reads the query's ``id`` and ``quarantine``.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame

from runtime.plan import TaskSpec
from runtime.quarantine import TaskFailure, attributable, downstream, upstream
from runtime.spark.live_plan import LivePlan

log = logging.getLogger("sana.runtime.query")

# A batch that still fails after this many quarantines is left to fail (the supervisor restarts the query).
MAX_QUARANTINE_ROUNDS = 3
PROBE_TOPIC = "__sana_probe__"


class Isolation:
    """Evaluate a batch so that a failing task is found, quarantined and left out."""

    def evaluate_isolated(self, plan: LivePlan, keyed: Mapping[str, Any], df: DataFrame, batch_id: int) -> tuple[int, int]:
        """Evaluate the plan without its quarantined tasks; if the batch fails, find the tasks that fail,
        quarantine them and evaluate the batch again without them (the same micro-batch, so the query's
        other dataflows lose nothing and wait one evaluation). An error no task explains (the broker down,
        a lost executor: :func:`~runtime.quarantine.attributable`) is raised: the query fails and the supervisor
        restarts it from its checkpoint."""
        for _ in range(MAX_QUARANTINE_ROUNDS):
            plan, keyed = self.without(plan, keyed, set(self.quarantine.failed()))
            try:
                return self.evaluate(plan, keyed, df, batch_id)
            except Exception as error:
                if not attributable(error):
                    raise
                failures = self.find_failures(plan, keyed, df, batch_id)
                if not failures:
                    raise
                log.error("query %s: batch %d failed (%s); task(s) %s fail on their own", self.id, batch_id,
                          describe_failure(str(error))[:300], sorted(f.task for f in failures))
                self.quarantine.add(failures)
        plan, keyed = self.without(plan, keyed, set(self.quarantine.failed()))
        return self.evaluate(plan, keyed, df, batch_id)

    @staticmethod
    def without(plan: LivePlan, keyed: Mapping[str, Any], failed: set[str]) -> tuple[LivePlan, dict[str, Any]]:
        """``plan`` less the failed tasks, whatever reads them, and the outputs of those."""
        if not failed or not failed & {task.id for task in plan.tasks}:
            return plan, dict(keyed)
        gone = downstream(plan.tasks, failed & {task.id for task in plan.tasks})
        tasks = tuple(task for task in plan.tasks if task.id not in gone)
        outputs = tuple((task_id, topic) for task_id, topic in plan.outputs if task_id not in gone)
        return (LivePlan(plan.version, tasks, dict(plan.reads), outputs, dict(plan.schemas)),
                {task_id: operator for task_id, operator in keyed.items() if task_id not in gone})

    def find_failures(self, plan: LivePlan, keyed: Mapping[str, Any], df: DataFrame, batch_id: int) -> list[TaskFailure]:
        """The tasks of ``plan`` that fail on this micro-batch although their inputs do not.

        Each output is evaluated alone (nothing written: a ``noop`` write);
        the tasks behind the outputs that fail are then evaluated alone, parents
        first, each with every column it produces (a column no output reads is
        still computed, so the task that computes a failing expression is the
        one named). Costs a Spark job per probe, only in a batch that failed.
        """
        failing_outputs = [output for output in plan.outputs if self.probe(plan, keyed, df, batch_id, [output]) is not None]
        if not failing_outputs:
            return []
        suspects = upstream(plan.tasks, [task_id for task_id, _ in failing_outputs])
        failures: list[TaskFailure] = []
        for task in plan.tasks:
            if task.id not in suspects or any(parent in downstream(plan.tasks, {f.task for f in failures})
                                               for _, parent in task.inputs):
                continue
            error = self.probe(plan, keyed, df, batch_id, [(task.id, PROBE_TOPIC)])
            if error is not None:
                failure = TaskFailure.from_error(task.id, self.id, batch_id, error)
                if failure.expression is None:  # Spark names the fragment only when it evaluated it interpreted
                    failure = dataclasses.replace(failure, expression=expression_of(task))
                failures.append(failure)
        return failures

    def probe(self, plan: LivePlan, keyed: Mapping[str, Any], df: DataFrame, batch_id: int,
              outputs: list[tuple[str, str]]) -> BaseException | None:
        """Evaluate only ``outputs`` (and what they read) without writing; the error it raised, or None."""
        needed = upstream(plan.tasks, [task_id for task_id, _ in outputs])
        tasks = tuple(task for task in plan.tasks if task.id in needed)
        reads = {parent: topic for parent, topic in plan.reads.items()
                 if any(parent == p for task in tasks for _, p in task.inputs)}
        probe = LivePlan(plan.version, tasks, reads, tuple(outputs), dict(plan.schemas))
        try:
            self.evaluate(probe, {task_id: op for task_id, op in keyed.items() if task_id in needed}, df, batch_id,
                           probe=True)
        except Exception as error:
            return error if attributable(error) else None
        return None


def expression_of(task: TaskSpec) -> str | None:
    """The SQL a user wrote in a task's config (a filter's condition, a select's columns), to name a failure.

    >>> from types import SimpleNamespace as T
    >>> expression_of(T(type="select", config={"columns": {"a": "x + 1", "b": "y"}}))
    'a = x + 1, b = y'
    """
    config = task.config or {}
    if task.type == "filter":
        return config.get("expr")
    if task.type == "select":
        return ", ".join(f"{name} = {text}" for name, text in (config.get("columns") or {}).items()) or None
    if task.type == "join":
        return config.get("on") if isinstance(config.get("on"), str) else None
    return None


PYTHON_ERROR = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failure|Failed|Timeout\w*)\b")


def describe_failure(text: str) -> str:
    """The line of a Spark query exception that says what failed: the innermost Python error if any.

    Spark wraps an error raised in ``foreachBatch`` in several Java and py4j
    layers; ``"RuntimeError: injected failure"`` is what an operator needs to see.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    python = [line for line in lines if PYTHON_ERROR.match(line) and not line.startswith(("org.", "java.", "py4j."))]
    chosen = python[-1] if python else (lines[0] if lines else "")
    return chosen[:2000]
