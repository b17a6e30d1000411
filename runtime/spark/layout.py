"""Which query runs which task, and what each query reads and writes (pure functions).

A *fragment* (assigned by the scheduler) is a connected group of tasks at one
site. The runtime runs each fragment in a Spark query; a new fragment that
has no source of its own and reads only tasks of one running query at its
site is *hosted* by that query (its tasks are added to the query's live plan;
no new query, no Kafka hop). Otherwise it gets a query of its own, which
reads the tasks of other queries through internal topics (taps).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from runtime.broker.topics import tap_topic
from runtime.operators.fields import duration_ms
from runtime.plan import TaskSpec


@dataclass
class QueryLayout:
    """What one query must do for a given set of running tasks."""

    tasks: list[TaskSpec] = field(default_factory=list)
    reads: dict[str, str] = field(default_factory=dict)
    outputs: list[tuple[str, str]] = field(default_factory=list)
    schemas: dict[str, dict[str, str]] = field(default_factory=dict)
    source_topics: set[str] = field(default_factory=set)
    sink_topics: set[str] = field(default_factory=set)

    @property
    def input_topics(self) -> set[str]:
        return self.source_topics | set(self.reads.values())

    @property
    def internal_topics(self) -> set[str]:
        """Internal topics this query writes (taps) or reads."""
        written = {topic for task_id, topic in self.outputs if topic not in self.sink_topics}
        return written | set(self.reads.values())


def parents_first(tasks: Mapping[str, TaskSpec]) -> list[TaskSpec]:
    """The tasks ordered so that parents come before children (ties by id)."""
    pending = {task_id: {parent for _, parent in task.inputs if parent in tasks} for task_id, task in tasks.items()}
    children: dict[str, list[str]] = {}
    for task_id, parents in pending.items():
        for parent in parents:
            children.setdefault(parent, []).append(task_id)
    ready = sorted(task_id for task_id, parents in pending.items() if not parents)
    order: list[TaskSpec] = []
    while ready:
        task_id = ready.pop(0)
        order.append(tasks[task_id])
        for child in sorted(children.get(task_id, ())):
            pending[child].discard(task_id)
            if not pending[child]:
                ready.append(child)
    if len(order) != len(tasks):
        raise ValueError("the running tasks contain a cycle")
    return order


def assign_hosts(
    tasks: Mapping[str, TaskSpec],
    host: Mapping[str, str],
    query_site: Mapping[str, str | None],
    new_query: Callable[[str], str],
    hosting: bool = True,
) -> dict[str, str]:
    """Give every fragment of ``tasks`` without a host a query; returns the full mapping.

    ``host`` maps fragments already running to their query, ``query_site`` a
    query to its site, ``new_query(fragment)`` makes a fresh query id.
    A fragment is hosted by a running query when it has no source task and
    every stream into it comes from that one query at the same site; or when
    every stream into it comes from other sites and one query at its site
    already reads them all: the streams then cross to the site once, whatever
    the number of consumers there (the router of IN sharing).
    With ``hosting=False`` every new fragment gets a query of its own (the
    baseline the benchmarks compare with).
    """
    result = dict(host)
    members: dict[str, list[TaskSpec]] = {}
    for task in parents_first(tasks):
        members.setdefault(task.fragment, []).append(task)
    sites = dict(query_site)
    reading: dict[str, set[str]] = {}  # query -> the tasks of queries at other sites it reads

    def record_reads(fragment: str) -> None:
        query = result[fragment]
        for task in members[fragment]:
            for _, parent in task.inputs:
                upstream = result.get(tasks[parent].fragment)
                if upstream is not None and upstream != query and sites.get(upstream) != sites.get(query):
                    reading.setdefault(query, set()).add(parent)

    for fragment in members:
        if fragment in result:
            record_reads(fragment)
    waiting = [fragment for fragment in members if fragment not in result]
    while waiting:
        progressed = False
        for fragment in list(waiting):
            inside = {task.id for task in members[fragment]}
            parents = {parent for task in members[fragment] for _, parent in task.inputs if parent not in inside}
            parent_fragments = {tasks[parent].fragment for parent in parents}
            if any(frag not in result for frag in parent_fragments):
                continue
            site = members[fragment][0].site
            queries = {result[frag] for frag in parent_fragments}
            has_source = any(task.type == "source" for task in members[fragment])
            remote = all(sites.get(query, site) != site for query in queries)
            router = [query for query, read in sorted(reading.items())
                      if sites.get(query) == site and parents <= read] if hosting and remote and parents else []
            if hosting and not has_source and len(queries) == 1 and sites.get(next(iter(queries)), site) == site:
                result[fragment] = next(iter(queries))
            elif not has_source and router:
                result[fragment] = router[0]
            else:
                result[fragment] = new_query(fragment)
                sites[result[fragment]] = site
            record_reads(fragment)
            waiting.remove(fragment)
            progressed = True
        if not progressed:  # fragments that read each other (through other sites): each its own query
            fragment = waiting.pop(0)
            result[fragment] = new_query(fragment)
            sites[result[fragment]] = members[fragment][0].site
            record_reads(fragment)
    return {fragment: query for fragment, query in result.items() if fragment in members}


def layouts(tasks: Mapping[str, TaskSpec], host: Mapping[str, str], namespace: str) -> dict[str, QueryLayout]:
    """Per query: its tasks (parents first), what it reads from other queries, what it writes."""
    query_of = {task_id: host[task.fragment] for task_id, task in tasks.items()}
    result: dict[str, QueryLayout] = {}
    tapped: set[str] = set()
    for task in parents_first(tasks):
        layout = result.setdefault(query_of[task.id], QueryLayout())
        layout.tasks.append(task)
        layout.schemas[task.id] = task.schema
        if task.type == "source":
            layout.source_topics.add(task.config["topic"])
        for _, parent in task.inputs:
            layout.schemas[parent] = tasks[parent].schema
            if query_of[parent] != query_of[task.id]:
                layout.reads[parent] = tap_topic(namespace, parent, tasks[parent].signature)
                tapped.add(parent)
    for task in parents_first(tasks):
        layout = result[query_of[task.id]]
        if task.type == "sink":
            layout.outputs.append((task.id, task.config["topic"]))
            layout.sink_topics.add(task.config["topic"])
        elif task.id in tapped:
            layout.outputs.append((task.id, tap_topic(namespace, task.id, task.signature)))
    return result


def mergeable(plans: Mapping[str, QueryLayout], sites: Mapping[str, str | None]) -> list[list[str]]:
    """Groups of running queries one query could run instead (defragmentation).

    Queries are grouped when one reads a tap the other writes and both run at
    the same site; a group whose queries read a source topic in common is left
    alone (one query reads a topic from one position, and theirs differ).

    >>> a = QueryLayout(outputs=[("hot", "t.hot")], source_topics={"urban"})
    >>> b = QueryLayout(reads={"hot": "t.hot"}, source_topics={"models"})
    >>> c = QueryLayout(source_topics={"taxi"})
    >>> mergeable({"q1": a, "q2": b, "q3": c}, {"q1": "eu", "q2": "eu", "q3": "eu"})
    [['q1', 'q2']]
    >>> mergeable({"q1": a, "q2": b}, {"q1": "eu", "q2": "us"})
    []
    """
    writer = {topic: query for query, plan in plans.items() for _, topic in plan.outputs if topic not in plan.sink_topics}
    leader = {query: query for query in plans}

    def find(query: str) -> str:
        while leader[query] != query:
            leader[query] = leader[leader[query]]
            query = leader[query]
        return query

    for query, plan in plans.items():
        for topic in plan.reads.values():
            upstream = writer.get(topic)
            if upstream is not None and sites.get(upstream) == sites.get(query):
                leader[find(query)] = find(upstream)
    groups: dict[str, list[str]] = {}
    for query in sorted(plans):
        groups.setdefault(find(query), []).append(query)
    result = []
    for members in groups.values():
        sources = [plans[query].source_topics for query in members]
        if len(members) > 1 and sum(len(topics) for topics in sources) == len(set().union(*sources)):
            result.append(members)
    return sorted(result)


def internal_topics(plans: Iterable[QueryLayout]) -> set[str]:
    return set().union(*(plan.internal_topics for plan in plans))


def gathers(plans: Mapping[str, QueryLayout]) -> dict[str, float]:
    """How long each query may hold its input to run fewer, larger micro-batches (seconds; 0: a batch a trigger).

    A sink's ``max_delay`` bounds what its records wait in all. The queries on the longest chain of taps ending
    at the sink's query share it equally, so that however many of them a record crosses, the sum stays within
    it; a query holds for the least any of its outputs allows: a sink without a delay allows nothing, and a tap
    allows what the queries reading it do.

    >>> def sink(task_id, delay=None):
    ...     config = {"topic": task_id, **({"max_delay": delay} if delay else {})}
    ...     return TaskSpec(task_id, task_id, "sink", config, None, (), "f", {})
    >>> alone = QueryLayout([sink("a", "6 seconds"), sink("b", "4 seconds")], outputs=[("a", "a"), ("b", "b")],
    ...                     sink_topics={"a", "b"})
    >>> mixed = QueryLayout([sink("a", "6 seconds"), sink("b")], outputs=[("a", "a"), ("b", "b")], sink_topics={"a", "b"})
    >>> gathers({"q1": alone, "q2": mixed})
    {'q1': 4.0, 'q2': 0.0}
    >>> up = QueryLayout(outputs=[("hot", "t.hot")])
    >>> down = QueryLayout([sink("c", "6 seconds")], reads={"hot": "t.hot"}, outputs=[("c", "c")], sink_topics={"c"})
    >>> gathers({"q1": up, "q2": down})
    {'q1': 3.0, 'q2': 3.0}
    >>> gathers({"q1": up, "q2": down, "q3": QueryLayout(reads={"hot": "t.hot"}, outputs=[("d", "d")], sink_topics={"d"})})
    {'q1': 0.0, 'q2': 3.0, 'q3': 0.0}
    """
    writer = {topic: query for query, plan in plans.items() for _, topic in plan.outputs if topic not in plan.sink_topics}
    readers: dict[str, list[str]] = {}
    for query, plan in plans.items():
        for topic in plan.reads.values():
            readers.setdefault(topic, []).append(query)
    depths: dict[str, int] = {}
    allowed: dict[str, float] = {}

    def depth(query: str, seen: frozenset = frozenset()) -> int:
        """Queries on the longest chain of taps from one reading no tap to ``query``, itself included."""
        if query not in depths:
            upstream = {writer[topic] for topic in plans[query].reads.values() if topic in writer} - seen - {query}
            depths[query] = 1 + max((depth(other, seen | {query}) for other in upstream), default=0)
        return depths[query]

    def allow(query: str, seen: frozenset = frozenset()) -> float:
        if query in allowed:
            return allowed[query]
        if query in seen:  # queries reading each other's taps in a ring: none holds
            return 0.0
        plan = plans[query]
        tasks = {task.id: task for task in plan.tasks}
        least = None
        for task_id, topic in plan.outputs:
            if topic in plan.sink_topics:
                delay = tasks[task_id].config.get("max_delay") if task_id in tasks else None
                value = duration_ms(delay) / 1000 / depth(query) if delay else 0.0
            else:
                value = min((allow(reader, seen | {query}) for reader in readers.get(topic, ()) if reader != query),
                            default=0.0)
            least = value if least is None else min(least, value)
        allowed[query] = least or 0.0
        return allowed[query]

    return {query: allow(query) for query in sorted(plans)}
