"""One micro-batch of a fragment query: one SQL statement over the cached batch, one write.

Every task of the live plan becomes a common table expression over its
inputs' (:class:`Ctes` keeps each statement to the definitions it reads);
every output (sink or tap) a branch of a final ``UNION ALL`` whose rows are
written to Kafka with the query's ``(writer, batch)`` headers. The outputs of
a window and of the roll-ups that run in its worker tasks are one branch, one
merge of their shuffle's output (:func:`written_together`). A fork is
computed once per batch (persisted); a keyed operator plans its shuffle
here and keeps its state in the worker state store; records of upstream
batches this query already processed are dropped by their origin
(:mod:`runtime.spark.replays`).

:class:`Statement` is part of :class:`~runtime.spark.fragment.FragmentQuery`
and reads its ``id``, ``run``, ``bootstrap``, ``producer``, ``written_*``
counters and state stores.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql import DataFrame

from runtime.operators import get_operator
from runtime.plan import TaskSpec
from runtime.spark import operators as spark_operators
from runtime.spark.kafka_source import NAME as SOURCE_FORMAT
from runtime.spark.keyed_operator import IDLE, NOT_SCANNED, FusedOutput, TaggedOutput, max_of_each
from runtime.spark.live_plan import LivePlan, consumer_counts, seq_slots
from runtime.spark.replays import replays
from runtime.spark.sql_text import encode_sql, literal, parse_sql

log = logging.getLogger("sana.runtime.query")

#: The key of the replay memory among a query's driver states.
REPLAYS_KEY = "__replays__"


class Statement:
    """Evaluate the live plan on one micro-batch."""

    def evaluate(self, plan: LivePlan, keyed: Mapping[str, Any], df: DataFrame, batch_id: int,
                 probe: bool = False, fold_replays: bool = True) -> tuple[int, int]:
        """Run the plan on one micro-batch: one SQL statement (CTEs + UNION ALL of the outputs), one write.

        With ``probe`` the outputs are computed in full but nothing is written
        and no state is kept (:meth:`find_failures`)."""
        if not plan.outputs:
            return 0, 0
        began = time.perf_counter()
        session = df.sparkSession  # the query's own session: its temp views are the ones SQL sees
        token = f"sana_{uuid.uuid4().hex[:12]}"
        consumers = consumer_counts(plan)
        readers = sum(1 for task in plan.tasks if task.type == "source") + len(plan.reads)
        shared = len(plan.outputs) > 1 or bool(keyed) or readers > 1 or bool(plan.reads)
        raw = df.persist() if shared else df
        raw.createOrReplaceTempView(f"{token}_raw")
        views, cached = [f"{token}_raw"], [raw] if shared else []
        names: dict[str, str] = {}
        ctes = Ctes()

        def define(key: str, body: str, reads: tuple[str, ...] = (), materialize: bool = False) -> str:
            if materialize:  # a fork: computed once per batch, not once per branch
                frame = session.sql(ctes.statement(f"SELECT * FROM ({body})", reads)).persist()
                view = f"{token}_f{len(views)}"
                frame.createOrReplaceTempView(view)
                views.append(view)
                cached.append(frame)
                body, reads = f"SELECT * FROM {view}", ()
            names[key] = ctes.add(body, reads)
            return names[key]

        stateful = bool(keyed) or bool(plan.reads)
        planned_keyed: dict[str, dict[str, Any]] = {}
        try:
            states = self.load_states(batch_id) if stateful else {}
            kept_routings = self.kept_routings(batch_id) if keyed else None  # an earlier attempt's, if any
            fused = fusions(plan.tasks, keyed, states)
            for parent in fused.values():  # a fused task reads its parent's shuffle, not its output
                consumers[parent] -= 1
            slots = seq_slots(plan.outputs)
            partitions = merge_partitions(session) if fused else None  # read from the JVM only where it is used
            together = written_together(plan, fused) if partitions else {}
            # what the metrics show: in a batch where the shuffle does not run (idle) they are written as any other
            self.written_together = {output: parent for parent, paths in together.items() for output in paths.values()}
            for paths in together.values():  # written from the shuffle's output: their relations are not read for it
                count_readers(consumers, paths, -1)
            combined: list[str] = []  # the branches that write the outputs of ``together``, one per fused shuffle
            feeds_keyed = {parent for task in plan.tasks if task.id in keyed and task.id not in fused
                           for _, parent in task.inputs}
            new_states: dict[str, Any] = {}
            internal = f"{token}_raw"
            # Reading another query's output, the origins of its records say which are replays. Where the batch's
            # output comes to the driver and no keyed state is touched, they ride in the output's job, and the batch
            # is computed again without the replays in the rare batch that has some; else a job of their own reads them.
            fold = fold_replays and bool(plan.reads) and not keyed and not probe and self.producer is not None
            if plan.reads and not fold:
                origins = self._origins(session, token, set(plan.reads.values()))
                internal = self._drop_replays(session, token, origins, states, new_states, views, count=not probe)
            def inputs_of(task: TaskSpec) -> dict[str, list[str]]:
                """Per port, the CTE names of the task's inputs (an input read from a tap is defined here)."""
                inputs: dict[str, list[str]] = {port.name: [] for port in get_operator(task.type).ports}
                for port, parent in task.inputs:
                    if parent not in names:
                        define(parent, parse_sql(internal, plan.reads[parent], plan.schemas[parent]),
                               materialize=consumers.get(parent, 0) > 1)
                    inputs[port].append(names[parent])
                return inputs

            def build(task: TaskSpec, scanned: Any = NOT_SCANNED) -> None:
                if task.type == "source":
                    define(task.id, parse_sql(f"{token}_raw", task.config["topic"], task.schema),
                           materialize=consumers.get(task.id, 0) > 1)
                    return
                inputs = inputs_of(task)
                operator = keyed.get(task.id)
                if operator is None:
                    builder = spark_operators.SQL[task.type]
                    define(task.id, builder(task, inputs), tuple(name for port in inputs.values() for name in port))
                    return
                relations = {port: [ctes.statement(f"SELECT * FROM {name}", [name]) for name in sources]
                             for port, sources in inputs.items()}
                state = states.get(task.id) or operator.initial_state()
                inside = {child: (keyed[child], states.get(child) or keyed[child].initial_state())
                          for child, parent in fused.items() if parent == task.id}
                output, planned_keyed[task.id], children, tagged = operator.plan_fused(
                    session, batch_id, relations, state, self._worker_store, scanned, inside,
                    None if kept_routings is None else kept_routings.get(task.id))
                branch = None
                if tagged is not None and task.id in together:
                    single = operator.tasks_for(state, planned_keyed[task.id]["routing"]) == 1  # as plan_fused did
                    branch = operator.combined_output_sql(operator.tagged_view, tagged_outputs(
                        plan, task.id, together[task.id], children, keyed, slots), 1 if single else partitions)
                if branch is None:  # (an idle batch: no shuffle) each output from its operator's relation
                    count_readers(consumers, together.pop(task.id, {}), +1)
                else:
                    combined.append(branch)
                if tagged is not None:
                    readers = sum(consumers.get(member, 0) for member in [task.id, *children]) + (branch is not None)
                    if readers > 1:  # the shuffle once a batch
                        cached.append(tagged.persist())
                if isinstance(output, str):  # a query over the fused shuffle's output, like the children's
                    define(task.id, output, materialize=consumers.get(task.id, 0) > 1 or task.id in feeds_keyed)
                else:
                    shuffles = not planned_keyed[task.id].get(IDLE)  # an idle operator's output is an empty relation
                    if shuffles and (consumers.get(task.id, 0) > 1 or task.id in feeds_keyed):  # the shuffle once a batch
                        output = output.persist()
                        cached.append(output)
                    view = f"{token}_k{len(views)}"
                    output.createOrReplaceTempView(view)
                    views.append(view)
                    define(task.id, f"SELECT * FROM {view}")
                for child, fused_output in children.items():  # queries over the shuffle's output
                    planned_keyed[child] = fused_output.draft
                    define(child, fused_output.sql, materialize=consumers.get(child, 0) > 1 or child in feeds_keyed)

            # In layers: first what no keyed output feeds; then one job answers the scans of the keyed operators
            # whose inputs are built (a window's largest event time), instead of a job per operator; then what
            # their outputs feed, and one job for the keyed operators of the next layer (roll-ups over a window,
            # docs/containment.md), and so on.
            # A roll-up of a window in this query runs in the window's worker tasks (fusions()): no layer of its own.
            depth = keyed_depths(plan.tasks, keyed, fused)
            for layer in range(max(depth.values(), default=0) + 1):
                for task in plan.tasks:
                    if depth[task.id] == layer and task.id not in keyed:
                        build(task)
                scans: dict[str, tuple[str, list[str]]] = {}
                for task in plan.tasks:
                    if depth[task.id] == layer and task.id in keyed and task.id not in fused:
                        inputs = inputs_of(task)
                        bare = {port: [f"SELECT * FROM {name}" for name in sources] for port, sources in inputs.items()}
                        query = keyed[task.id].scan_sql(bare, states.get(task.id) or keyed[task.id].initial_state())
                        if query is not None:
                            scans[task.id] = (query, [name for sources in inputs.values() for name in sources])
                scanned: dict[str, Any] = {}
                if scans:
                    reads = [name for _, names_read in scans.values() for name in names_read]
                    row = session.sql(ctes.statement(max_of_each([query for query, _ in scans.values()]), reads)).first()
                    scanned = dict(zip(scans, row))
                for task in plan.tasks:
                    if depth[task.id] == layer and task.id in keyed and task.id not in fused:
                        build(task, scanned.get(task.id, NOT_SCANNED))
            merged = {output for paths in together.values() for output in paths.values()}
            alone = [output for output in plan.outputs if output not in merged]
            union = " UNION ALL ".join([*(encode_sql(names[task_id], topic, slots[(task_id, topic)])
                                          for task_id, topic in alone), *combined])
            if fold:
                union = f"{union} UNION ALL {_origins_sql(token, set(plan.reads.values()))}"
            output = session.sql(ctes.statement(union, [names[task_id] for task_id, _ in alone]))
            # The routings of the batch's keyed operators are kept before any of its output is written: a replay
            # (after a crash, in another process, with other requests pending or none) routes as this attempt did,
            # so it names a join's rows, which come out of the workers' partitions, as this attempt did.
            routings = {task_id: draft["routing"] for task_id, draft in planned_keyed.items() if task_id not in fused}
            if routings and not probe and routings != kept_routings:
                self.keep_routings(batch_id, routings)
            headers = [("sana.writer", self.id.encode()), ("sana.run", self.run.encode()), ("sana.batch", str(batch_id).encode())]
            planned = time.perf_counter()
            if probe:
                output.write.format("noop").mode("overwrite").save()
                return 0, len(plan.outputs)
            if self.producer is not None:
                # The driver takes the whole output here anyway (local mode), so one task per core does: the
                # union has a task per output and input partition, and every task deserializes the generated
                # code of every output (docs/reuse.md, "Where a hosted query's CPU goes").
                table = output.coalesce(self._cores).toArrow()
                if fold:
                    table, origins = _split_origins(table)
                    memory = _memory(states)
                    if replays(memory, origins):  # the rare batch with replays: again, their origins read first
                        return self.evaluate(plan, keyed, df, batch_id, fold_replays=False)
                    new_states[REPLAYS_KEY] = memory
                collected = time.perf_counter()
                written = self.producer.send_table(table, headers)
                self._count_written(plan, table)
            else:
                # Computed in full before a record is written: a task failing half-way through the write would
                # leave part of the batch in Kafka, and the batch evaluated again without that task (its outputs
                # gone from the union) would name the same records differently, so they would not read as replays.
                output = output.persist()
                cached.append(output)
                output.count()
                collected, written = time.perf_counter(), -1
                (
                    output.write.format(SOURCE_FORMAT).option("bootstrap", self.bootstrap).option("writer", self.id)
                    .option("run", self.run).option("batch", str(batch_id)).mode("append").save()
                )
            self.last_timing = {"plan_ms": round(1000 * (planned - began), 1),
                                "compute_ms": round(1000 * (collected - planned), 1),
                                "write_ms": round(1000 * (time.perf_counter() - collected), 1)}
            for task_id, draft in planned_keyed.items():
                new_states[task_id] = keyed[task_id].finish(batch_id, draft, self._worker_store)
            planned_keyed.clear()
            if stateful:
                self.save_states(batch_id, new_states)
            return written, len(plan.outputs)
        finally:
            for task_id in planned_keyed:  # the batch failed: moves it took are requested again
                keyed[task_id].abort()
            for view in views:
                session.catalog.dropTempView(view)
            for frame in cached:
                frame.unpersist()

    def _count_written(self, plan: LivePlan, table) -> None:
        """Add the records and value bytes this batch wrote to the task behind each output topic."""
        if table.num_rows == 0:
            return
        import pyarrow.compute as pc

        sizes = table.append_column("size", pc.binary_length(table.column("value")))
        totals = sizes.group_by("topic").aggregate([("size", "sum"), ("size", "count")])
        task_of = {topic: task_id for task_id, topic in plan.outputs}
        for topic, size, count in zip(totals.column("topic").to_pylist(), totals.column("size_sum").to_pylist(),
                                      totals.column("size_count").to_pylist()):
            task_id = task_of.get(topic)
            if task_id is not None:
                self.written_bytes[task_id] = self.written_bytes.get(task_id, 0) + int(size)
                self.written_records[task_id] = self.written_records.get(task_id, 0) + int(count)

    @staticmethod
    def _origins(session, token: str, topics: set[str]) -> list[tuple[str, str]]:
        """``(topic, origin)`` of the batch's records read from ``topics`` (other queries' outputs), in order."""
        rows = session.sql(f"SELECT topic, origin FROM {token}_raw WHERE {_origin_condition(topics)}").toArrow()
        return list(zip(rows.column("topic").to_pylist(), rows.column("origin").to_pylist()))

    def _drop_replays(self, session, token: str, origins: list[tuple[str, str]], states: dict[str, Any],
                      new_states: dict[str, Any], views: list[str], count: bool = True) -> str:
        """The raw view without records of upstream batches this query already processed (see replays.py)."""
        seen = _memory(states)
        dropped = replays(seen, origins)
        new_states[REPLAYS_KEY] = seen
        if not dropped:
            return f"{token}_raw"
        if count:
            self.replays_dropped += len(dropped)
            log.warning("query %s: dropped %d replayed upstream record(s)", self.id, len(dropped))
        session.createDataFrame([(origin,) for origin in dropped], "origin string").createOrReplaceTempView(f"{token}_drop")
        session.sql(f"SELECT r.* FROM {token}_raw r LEFT ANTI JOIN {token}_drop d ON r.origin = d.origin") \
            .createOrReplaceTempView(f"{token}_dedup")
        views.extend([f"{token}_drop", f"{token}_dedup"])
        return f"{token}_dedup"


#: The ``topic`` of the rows that carry origins in a folded output job: never a Kafka topic name ('|' is not allowed).
ORIGINS = "|origins"


def _memory(states: Mapping[str, Any]) -> dict:
    """A copy of the replay memory kept with the states (replays() updates it in place)."""
    return {key: (batch, set(seqs)) for key, (batch, seqs) in (states.get(REPLAYS_KEY) or {}).items()}


def _origin_condition(topics: set[str]) -> str:
    listed = ", ".join(literal(topic) for topic in sorted(topics))
    return f"origin IS NOT NULL AND topic IN ({listed})"


def _origins_sql(token: str, topics: set[str]) -> str:
    """A branch of the output's union: one row per record read from ``topics``, its topic and origin in ``value``."""
    return f"SELECT {literal(ORIGINS)} AS topic, concat(topic, '|', origin) AS value, CAST(0 AS BIGINT) AS seq " \
           f"FROM {token}_raw WHERE {_origin_condition(topics)}"


def _split_origins(table):
    """The output rows of a folded job, and the ``(topic, origin)`` pairs its origin rows carry, in order.

    >>> import pyarrow as pa
    >>> rows, origins = _split_origins(pa.table({"topic": ["out", ORIGINS, "out", ORIGINS],
    ...                                          "value": ["{}", "tap|q1|4|0|0", "{}", "tap|q1|4|1|0"]}))
    >>> rows.num_rows, origins
    (2, [('tap', 'q1|4|0|0'), ('tap', 'q1|4|1|0')])
    """
    import pyarrow.compute as pc

    marked = pc.equal(table.column("topic"), ORIGINS)
    origins = [tuple(value.split("|", 1)) for value in table.filter(marked).column("value").to_pylist()]
    return table.filter(pc.invert(marked)), origins


class Ctes:
    """A batch's common table expressions; each statement carries only those it reads, directly or not.

    Spark analyzes every definition of a ``WITH`` clause, read or not, and a
    keyed operator's output enters later definitions as an analyzed plan: a
    statement carrying all of a big fragment's definitions took 38-50 s to
    plan a batch of a 28-task query hosting 8 keyed operators (5.5 s now).

    >>> ctes = Ctes()
    >>> a = ctes.add("SELECT 1 AS x"); b = ctes.add("SELECT 2 AS y"); c = ctes.add(f"SELECT x FROM {a}", [a])
    >>> ctes.statement(f"SELECT * FROM {c}", [c])
    'WITH t0 AS (SELECT 1 AS x), t2 AS (SELECT x FROM t0) SELECT * FROM t2'
    >>> ctes.statement("SELECT 3", [])
    'SELECT 3'
    """

    def __init__(self) -> None:
        self._defined: dict[str, tuple[str, tuple[str, ...]]] = {}  # name -> (body, names it reads)

    def add(self, body: str, reads: Iterable[str] = ()) -> str:
        name = f"t{len(self._defined)}"
        self._defined[name] = (body, tuple(reads))
        return name

    def statement(self, query: str, reads: Iterable[str]) -> str:
        needed: set[str] = set()
        pending = list(reads)
        while pending:
            name = pending.pop()
            if name in self._defined and name not in needed:
                needed.add(name)
                pending.extend(self._defined[name][1])
        clauses = [f"{name} AS ({body})" for name, (body, _) in self._defined.items() if name in needed]
        return f"WITH {', '.join(clauses)} {query}" if clauses else query


def keyed_depths(tasks: Iterable[TaskSpec], keyed: Mapping[str, Any], fused: Mapping[str, str] = {}) -> dict[str, int]:
    """Each task's layer (``tasks`` in plan order): the most keyed tasks on a path from a source to its inputs.
    A layer's keyed tasks read only tasks of their layer or before it, so their scans can run as one job. A task
    ``fused`` into another (:func:`fusions`) is in that one's layer: it runs in its worker tasks.

    >>> from types import SimpleNamespace as T
    >>> tasks = [T(id="s", inputs=[]), T(id="w", inputs=[("in", "s")]), T(id="f", inputs=[("in", "w")]),
    ...          T(id="r", inputs=[("in", "f")]), T(id="g", inputs=[("in", "s")])]
    >>> keyed_depths(tasks, {"w": object(), "r": object()})
    {'s': 0, 'w': 0, 'f': 1, 'r': 1, 'g': 0}
    >>> keyed_depths([*tasks[:2], T(id="u", inputs=[("in", "w")]), T(id="v", inputs=[("in", "u")])],
    ...              {"w": object(), "u": object()}, {"u": "w"})
    {'s': 0, 'w': 0, 'u': 0, 'v': 1}
    """
    depth: dict[str, int] = {}
    for task in tasks:
        if task.id in fused:
            depth[task.id] = depth[fused[task.id]]
            continue
        depth[task.id] = max((depth[parent] + (parent in keyed) for _, parent in task.inputs if parent in depth), default=0)
    return depth


def fusions(tasks: Iterable[TaskSpec], keyed: Mapping[str, Any],
            states: Mapping[str, Any] = {}) -> dict[str, str]:
    """Keyed tasks that run inside another keyed task's worker tasks, each to that task: those reading one keyed
    task of the query alone whose operator says it can (``fuses_into``: a window's roll-up); not one that others
    run inside, and not inside one that runs inside another. Nor one whose saved routing (in ``states``, the driver
    states before the batch) splits a key, unless it is the other's (it ran inside it): a state placed by a split
    of its own moves to the other's routing only once the split has ended.

    >>> from types import SimpleNamespace as T
    >>> class Op:
    ...     def __init__(self, fuses): self.fuses = fuses
    ...     def fuses_into(self, parent): return self.fuses
    >>> tasks = [T(id="s", inputs=[]), T(id="w", inputs=[("in", "s")]), T(id="r", inputs=[("in", "w")]),
    ...          T(id="x", inputs=[("in", "r")]), T(id="j", inputs=[("left", "w"), ("right", "s")])]
    >>> operators = {"w": Op(False), "r": Op(True), "x": Op(True), "j": Op(True)}
    >>> fusions(tasks, operators)
    {'r': 'w'}
    >>> split = {"table": [0, 1], "splits": [{"worker": 0}]}
    >>> fusions(tasks, operators, {"r": {"routing": split}, "w": {"routing": {"table": [0, 1], "splits": []}}})
    {'x': 'r'}
    >>> fusions(tasks, operators, {"r": {"routing": split}, "w": {"routing": split}})
    {'r': 'w'}
    """
    fused: dict[str, str] = {}
    for task in tasks:
        parents = [parent for _, parent in task.inputs]
        if (task.id in keyed and len(parents) == 1 and parents[0] in keyed and parents[0] not in fused
                and keyed[task.id].fuses_into(keyed[parents[0]]) and _placeable(states.get(task.id), states.get(parents[0]))):
            fused[task.id] = parents[0]
    return fused


def written_together(plan: LivePlan, fused: Mapping[str, str]) -> dict[str, dict[str, tuple[str, str]]]:
    """Per keyed task others run inside (``fused``), the operators of its shuffle (itself and those) whose one
    output is written straight from the shuffle's output: each with that output ``(task id, topic)``, its own or a
    sink's that reads it alone. Only where two or more are: one output alone is encoded as any other.

    >>> from types import SimpleNamespace as T
    >>> plan = T(tasks=[T(id="w", type="window_aggregate", inputs=[("in", "s")]),
    ...                 T(id="r", type="window_aggregate", inputs=[("in", "w")]),
    ...                 T(id="o", type="sink", inputs=[("in", "w")]), T(id="p", type="sink", inputs=[("in", "r")])],
    ...          outputs=(("o", "out-w"), ("p", "out-r")))
    >>> written_together(plan, {"r": "w"})
    {'w': {'w': ('o', 'out-w'), 'r': ('p', 'out-r')}}
    >>> written_together(T(tasks=plan.tasks, outputs=(*plan.outputs, ("r", "tap-r"))), {"r": "w"})
    {}
    """
    by_id = {task.id: task for task in plan.tasks}
    paths: dict[str, list[tuple[str, str]]] = {}
    for task_id, topic in plan.outputs:
        task = by_id.get(task_id)
        member = task.inputs[0][1] if task is not None and task.type == "sink" and len(task.inputs) == 1 else task_id
        paths.setdefault(member, []).append((task_id, topic))
    together = {}
    for parent in dict.fromkeys(fused.values()):
        members = [parent, *(child for child, theirs in fused.items() if theirs == parent)]
        group = {member: paths[member][0] for member in members if len(paths.get(member, ())) == 1}
        if len(group) > 1:
            together[parent] = group
    return together


def count_readers(consumers: dict[str, int], paths: Mapping[str, tuple[str, str]], change: int) -> None:
    """Add ``change`` to the readers of what each output of ``paths`` (member -> its output) reads: the member's
    relation, and the sink's when a sink writes it."""
    for member, (task_id, _) in paths.items():
        consumers[task_id] = consumers.get(task_id, 0) + change
        if task_id != member:
            consumers[member] = consumers.get(member, 0) + change


def merge_partitions(session) -> int | None:
    """The partitions of a keyed operator's merge in this session, which name its rows; None when adaptive
    execution may change them (then every output is encoded from its own merge)."""
    if session.conf.get("spark.sql.adaptive.enabled", "false").lower() == "true":
        return None
    return int(session.conf.get("spark.sql.shuffle.partitions"))


def tagged_outputs(plan: LivePlan, parent: str, paths: Mapping[str, tuple[str, str]],
                   children: Mapping[str, FusedOutput], keyed: Mapping[str, Any],
                   slots: Mapping[tuple[str, str], int]) -> list[TaggedOutput]:
    """The outputs ``paths`` (member -> its output) of ``parent``'s fused shuffle as its output names them."""
    by_id = {task.id: task for task in plan.tasks}
    outputs = []
    for member, (task_id, topic) in paths.items():
        tag, renames = (0, {}) if member == parent else (children[member].tag, children[member].renames)
        casts = by_id[task_id].schema if task_id != member else None
        outputs.append(TaggedOutput(tag, keyed[member], renames, topic, slots[(task_id, topic)], casts))
    return outputs


def _placeable(state: Mapping[str, Any] | None, parents: Mapping[str, Any] | None) -> bool:
    """Whether a keyed task's state can move to its parent's routing: no split of its own, or the parent's."""
    mine = (state or {}).get("routing") or {}
    if not mine.get("splits"):
        return True
    theirs = (parents or {}).get("routing") or {}
    return mine.get("table") == theirs.get("table") and mine.get("splits") == theirs.get("splits")
