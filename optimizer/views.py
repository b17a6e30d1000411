"""Small :class:`~planning.model.RunningView` implementations: nothing running, or a dict of tasks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from planning.model import RunningTask


class EmptyRunning:
    """A running set with nothing in it.

    >>> list(EmptyRunning().instances("any"))
    []
    """

    def instances(self, signature: str) -> Iterable[RunningTask]:
        return ()

    def task(self, task_id: str) -> RunningTask:
        raise KeyError(task_id)

    def arrivals(self, task_id: str) -> Mapping[str, Iterable[str]]:
        return {}

    def running_tasks(self) -> Iterable[RunningTask]:
        return ()

    def flow_index(self) -> None:
        return None


class DictRunning:
    """A running set given as tasks; arrivals derived with routers (one crossing per producer and site).

    >>> view = DictRunning([RunningTask("s", "sig", "source", "x", (), 4.0), RunningTask("f", "g", "filter", "a", (("in", "s"),), 2.0)])
    >>> [task.id for task in view.instances("sig")], dict(view.arrivals("s"))
    (['s'], {'a': ['f']})
    """

    def __init__(self, tasks: Iterable[RunningTask]) -> None:
        self._tasks = {task.id: task for task in tasks}
        self._by_signature: dict[str, list[RunningTask]] = {}
        self._arrivals: dict[str, dict[str, list[str]]] = {}
        for task in self._tasks.values():
            self._by_signature.setdefault(task.signature, []).append(task)
            for _, parent in task.inputs:
                if self._tasks[parent].site != task.site:
                    self._arrivals.setdefault(parent, {}).setdefault(task.site, []).append(task.id)

    def instances(self, signature: str) -> Iterable[RunningTask]:
        return tuple(self._by_signature.get(signature, ()))

    def task(self, task_id: str) -> RunningTask:
        return self._tasks[task_id]

    def arrivals(self, task_id: str) -> Mapping[str, Iterable[str]]:
        return self._arrivals.get(task_id, {})

    def running_tasks(self) -> Iterable[RunningTask]:
        return tuple(self._tasks.values())

    def flow_index(self) -> None:
        return None
