"""Running tasks that failed at run time, taken out of the queries they shared.

A Spark query hosts the tasks of many dataflows, often of several owners, and
one failing expression fails the whole micro-batch. The fragment query
(:mod:`runtime.spark.fragment`) finds which task failed, records it here and
runs the batch again without that task and what depends on it, so the other
dataflows go on within the same micro-batch. A recorded task is *quarantined*:
no batch evaluates it any more, the manager offers it to no new dataflow (a
new submit of an equivalent task gets a fresh one), and every dataflow using it
shows status ``failed`` with the task, the expression and the error, until its
owners remove it.

The records live in Redis (``<prefix>:runtime:failed``, running task id ->
JSON), so a restarted service keeps the failing work out instead of failing
again on the replayed batch.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import redis

log = logging.getLogger("sana.runtime.quarantine")

# Spark errors read "[ERROR_CLASS] message SQLSTATE: xxxxx" then "== SQL (line 1, position 8) ==", the fragment, carets.
_ERROR_CLASS = re.compile(r"\[([A-Z][A-Z0-9_.]+)\]")
_SQL_CONTEXT = re.compile(r"== SQL[^=\n]*==\s*\n(?P<fragment>[^\n]+)")
MAX_ERROR_CHARS = 1000
# What a task's own data or SQL makes fail, as opposed to the service (an executor lost, the broker away, a bug of
# ours): SQLSTATE class 22 is the SQL standard's "data exception" (casts, division by zero, overflow, an index out
# of range, a bad datetime), 42 "syntax error or access rule violation" (Spark's analysis of the task's SQL); and
# the JVM exceptions Spark's expressions throw on data without an error class.
_ATTRIBUTABLE = re.compile(
    r"SQLSTATE: (22|42)[0-9A-Z]{3}"
    r"|java\.lang\.(ArithmeticException|NumberFormatException|IllegalArgumentException|ArrayIndexOutOfBoundsException"
    r"|NegativeArraySizeException)"
    r"|java\.time\.(DateTimeException|format\.DateTimeParseException)"
    r"|java\.util\.regex\.PatternSyntaxException")


def attributable(error: BaseException | str) -> bool:
    """Whether an error is one a task's expressions raise on the data (so the task, not the service, is at fault).

    >>> attributable("org.apache.spark.SparkArithmeticException: [DIVIDE_BY_ZERO] Division by zero. SQLSTATE: 22012")
    True
    >>> attributable("py4j.protocol.Py4JNetworkError: Answer from Java side is empty")
    False
    """
    return _ATTRIBUTABLE.search(str(error)) is not None


@dataclass(frozen=True)
class TaskFailure:
    """Why a running task was quarantined.

    ``error`` is Spark's message (its first line), ``error_class`` Spark's error
    class when it has one, ``expression`` the part of the task's SQL Spark
    pointed at (else None), ``query`` and ``batch`` where it happened.
    """

    task: str
    query: str
    batch: int
    error: str
    error_class: str | None = None
    expression: str | None = None
    at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_error(cls, task: str, query: str, batch: int, error: BaseException | str, at: float | None = None) -> "TaskFailure":
        """Read the error class, the first line and the SQL fragment out of a Spark error.

        >>> text = ('[DATETIME_OVERFLOW] Datetime operation overflow. SQLSTATE: 22008\\n'
        ...         '== SQL (line 1, position 9) ==\\ntimestamp_seconds(n)\\n        ^^^^^^^^')
        >>> failure = TaskFailure.from_error("t1", "q1", 4, text, at=0.0)
        >>> failure.error_class, failure.expression, failure.error
        ('DATETIME_OVERFLOW', 'timestamp_seconds(n)', '[DATETIME_OVERFLOW] Datetime operation overflow. SQLSTATE: 22008')
        """
        text = str(error)
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        first = next((line for line in lines if _ERROR_CLASS.search(line)), lines[0] if lines else type(error).__name__)
        error_class = _ERROR_CLASS.search(first)
        context = _SQL_CONTEXT.search(text)
        return cls(
            task=task, query=query, batch=batch, error=first[:MAX_ERROR_CHARS],
            error_class=error_class.group(1) if error_class else None,
            expression=context.group("fragment").strip() if context else None,
            at=time.time() if at is None else at,
        )


class Quarantine:
    """The quarantined tasks of one runtime, in memory and in Redis; safe to share between threads."""

    def __init__(self, client: redis.Redis | None, key: str) -> None:
        self._redis = client
        self._key = key
        self._lock = threading.Lock()
        self._failed: dict[str, TaskFailure] = {}

    def load(self) -> None:
        """Read the records back from Redis (at start; a record that does not parse is dropped, logged)."""
        if self._redis is None:
            return
        loaded: dict[str, TaskFailure] = {}
        for key, value in self._redis.hgetall(self._key).items():
            try:
                loaded[key.decode()] = TaskFailure(**json.loads(value))
            except (TypeError, ValueError) as error:
                log.error("dropping an unreadable quarantine record of task %s: %s", key, error)
        with self._lock:
            self._failed = loaded

    def add(self, failures: Iterable[TaskFailure]) -> None:
        """Quarantine ``failures``' tasks (written to Redis first: a restart must not run them again)."""
        failures = list(failures)
        if not failures:
            return
        if self._redis is not None:
            self._redis.hset(self._key, mapping={f.task: json.dumps(f.to_dict(), sort_keys=True) for f in failures})
        with self._lock:
            for failure in failures:
                self._failed[failure.task] = failure
        for failure in failures:
            log.error("task %s failed in query %s at batch %d and is quarantined (the query goes on without it): %s",
                      failure.task, failure.query, failure.batch, failure.error)

    def forget(self, tasks: Iterable[str]) -> None:
        """Drop the records of tasks that no longer run (their dataflows were removed)."""
        with self._lock:
            gone = [task for task in tasks if task in self._failed]
            for task in gone:
                del self._failed[task]
        if gone and self._redis is not None:
            self._redis.hdel(self._key, *gone)

    def failed(self) -> dict[str, TaskFailure]:
        with self._lock:
            return dict(self._failed)

    def __contains__(self, task: object) -> bool:
        with self._lock:
            return task in self._failed


def downstream(tasks: Iterable[Any], roots: Iterable[str]) -> set[str]:
    """``roots`` and every task of ``tasks`` (parents first, each with ``inputs``) that reads one of them.

    >>> from types import SimpleNamespace as T
    >>> plan = [T(id="s", inputs=[]), T(id="f", inputs=[("in", "s")]), T(id="g", inputs=[("in", "f")]),
    ...         T(id="h", inputs=[("in", "s")])]
    >>> sorted(downstream(plan, {"f"}))
    ['f', 'g']
    """
    out = set(roots)
    for task in tasks:
        if any(parent in out for _, parent in task.inputs):
            out.add(task.id)
    return out


def upstream(tasks: Iterable[Any], roots: Iterable[str]) -> set[str]:
    """``roots`` (those among ``tasks``) and every task of ``tasks`` they read, directly or not.

    >>> from types import SimpleNamespace as T
    >>> plan = [T(id="s", inputs=[]), T(id="f", inputs=[("in", "s")]), T(id="g", inputs=[("in", "f")]),
    ...         T(id="h", inputs=[("in", "s")])]
    >>> sorted(upstream(plan, {"g"}))
    ['f', 'g', 's']
    """
    by_id = {task.id: task for task in tasks}
    found: set[str] = set()
    pending = list(roots)
    while pending:
        task_id = pending.pop()
        if task_id in by_id and task_id not in found:
            found.add(task_id)
            pending.extend(parent for _, parent in by_id[task_id].inputs)
    return found
