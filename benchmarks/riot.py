"""A seeded generator of RIoTBench-style IoT dataflows (docs/reuse.md, "Workloads").

RIoTBench composes IoT tasks into four apps (ETL, STATS, PRED, TRAIN). The reuse
paper built 21 apps from them over three shared sources (smart grid, urban
sensing, NYC taxi), 4-8 tasks per DAG. This module generates any number of such
apps, each a valid Sana dataflow document, varied by parameters (thresholds,
windows, which branches) so that many share a prefix (``source -> parse``) and
some share more, but not everything.

How RIoTBench tasks map onto Sana operators:

==========================  ==============================================================
RIoTBench task              Sana task
==========================  ==============================================================
source (MQTT/Kafka)         ``source`` on ``riot-grid`` / ``riot-urban`` / ``riot-taxi``
SenMLParse, ParseProject    ``select`` (cast the raw value, project the observation columns)
RangeFilter                 ``filter`` ``value BETWEEN lo AND hi``
BloomFilterCheck            ``filter`` ``sensor IN (...)``
Interpolation               ``select`` with ``coalesce(value, default)``
Join (by msgid)             ``join`` on ``msgid`` of the observation and a quality branch
Annotation, CsvToSenML      ``select`` (add a label; render a SenML-ish text column)
KalmanFilter, SimpleLinReg  ``select`` arithmetic (a fixed-gain estimate; ``est * a + b``)
SecondOrderMoment           ``window_aggregate`` avg/max/min per sensor and obstype
DistinctApproxCount         ``window_aggregate`` ``count(*)`` per obstype
BlockWindowAverage          ``window_aggregate`` ``avg(value)`` per sensor and obstype
model download (PRED)       a second ``source`` (``riot-<domain>-models``) joined on obstype
DecisionTreeClassify        ``select`` ``CASE WHEN value > split ...`` over the model join
LinearRegressionPredict     ``select`` ``value * slope + intercept`` over the model join
ErrorEstimation             ``select`` ``abs(predicted - value)``
TableRangeQuery (TRAIN)     ``filter`` on obstype and value range
LinearRegressionTrain       ``select`` (x, y, xy, xx) -> ``window_aggregate`` sums -> ``select`` slope
AnnotateDTClass, DTTrain    ``select`` class label -> ``window_aggregate`` count/avg per class
Publish, BlobUpload, ...    ``sink``, on a topic unique to the dataflow (``riot-<n>-<app>-<branch>``)
==========================  ==============================================================

ETL's BloomFilterCheck sits behind RangeFilter while STATS' sits behind
ParseProject, so equal configs there must not be shared (their ancestors differ).

Usage::

    from benchmarks.riot import riot_dataflow, riot_workload
    document = riot_dataflow(17, seed=1)          # the 17th app of workload seed 1
    documents = list(riot_workload(100, seed=1))  # apps 0..99

    python -m benchmarks.riot --count 2000 --seed 1   # validate and summarize
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# -- the three shared sources and their model topics ---------------------------------

SOURCE_SCHEMAS: dict[str, dict[str, str]] = {
    # Smart grid: SenML-like readings from household meters (load, voltage, current, ...).
    "grid": {"msgid": "string", "meter": "string", "house": "string", "obstype": "string",
             "v": "string", "unit": "string", "ts": "timestamp"},
    # Urban sensing (SYS city sensors): one observation per record, value as text.
    "urban": {"msgid": "string", "sensor": "string", "city": "string", "obstype": "string",
              "v": "string", "unit": "string", "lat": "double", "lon": "double", "ts": "timestamp"},
    # NYC taxi trips (TAXI): one trip per record.
    "taxi": {"msgid": "string", "medallion": "string", "hack_license": "string", "pickup_zone": "string",
             "trip_time_s": "int", "trip_distance": "double", "fare": "double", "tip": "double",
             "tolls": "double", "total": "double", "ts": "timestamp"},
}
SOURCE_TOPICS = {domain: f"riot-{domain}" for domain in SOURCE_SCHEMAS}
MODEL_SCHEMA = {"obstype": "string", "slope": "double", "intercept": "double", "split": "double",
                "version": "string", "ts": "timestamp"}
MODEL_TOPICS = {domain: f"riot-{domain}-models" for domain in SOURCE_SCHEMAS}

# SenMLParse: raw record -> observation {msgid, sensor, obstype, value, unit, ts}.
# Grid and urban have one parse each; a taxi trip becomes one of three observations.
_SENML_PARSE: dict[str, list[dict[str, str]]] = {
    "grid": [{"msgid": "msgid", "sensor": "meter", "obstype": "obstype", "value": "CAST(v AS DOUBLE)",
              "unit": "unit", "ts": "ts"}],
    "urban": [{"msgid": "msgid", "sensor": "sensor", "obstype": "obstype", "value": "CAST(v AS DOUBLE)",
               "unit": "unit", "ts": "ts"}],
    "taxi": [
        {"msgid": "msgid", "sensor": "medallion", "obstype": "'fare'", "value": "fare", "unit": "'usd'", "ts": "ts"},
        {"msgid": "msgid", "sensor": "medallion", "obstype": "'distance'", "value": "trip_distance",
         "unit": "'mile'", "ts": "ts"},
        {"msgid": "msgid", "sensor": "medallion", "obstype": "'speed'",
         "value": "trip_distance / (CAST(trip_time_s AS DOUBLE) / 3600.0)", "unit": "'mph'", "ts": "ts"},
    ],
}
# ParseProject (STATS): a narrower projection, {sensor, obstype, value, ts}.
_PARSE_PROJECT: dict[str, list[dict[str, str]]] = {
    domain: [{key: value for key, value in columns.items() if key in ("sensor", "obstype", "value", "ts")}
             for columns in variants]
    for domain, variants in _SENML_PARSE.items()
}
_RANGES = {
    "grid": [(0, 50), (0, 100), (5, 250), (10, 500)],
    "urban": [(-20, 50), (-40, 60), (0, 100), (0, 1000)],
    "taxi": [(0, 100), (1, 200), (0, 60), (2, 500)],
}
_SENSOR_PREFIX = {"grid": "meter", "urban": "sys", "taxi": "cab"}
_WINDOWS = ["10 seconds", "30 seconds", "1 minute", "5 minutes"]
_WATERMARKS = ["5 seconds", "10 seconds", "30 seconds"]
_TRAIN_WINDOWS = ["1 hour", "6 hours", "1 day"]
_JOIN_WINDOWS = ["10 seconds", "30 seconds", "1 minute"]
_MODEL_JOIN_WINDOWS = ["1 minute", "5 minutes", "1 hour"]
_GAINS = [0.2, 0.4, 0.6, 0.8]
_PRIORS = [0.0, 20.0, 50.0]
_SLOPES = [(0.9, 0.5), (1.1, -0.5), (1.0, 2.0)]
_DEFAULTS = [0.0, 1.0, 20.5]
_SPLITS = [10.0, 25.0, 50.0, 100.0]
_LABELS = ["ok", "checked", "etl"]

APPS = ("ETL", "STATS", "PRED", "TRAIN")
APP_WEIGHTS = (0.3, 0.3, 0.2, 0.2)
MIN_TASKS, MAX_TASKS = 4, 8


def _bloom_set(domain: str, which: int) -> str:
    """One of four fixed sensor-id sets, rendered as an ``IN`` list."""
    ids = [f"'{_SENSOR_PREFIX[domain]}-{which * 8 + k:03d}'" for k in range(8)]
    return f"sensor IN ({', '.join(ids)})"


@dataclass
class _Doc:
    """A dataflow under construction: tasks in order, streams by (from, to, port)."""

    name: str
    number: int
    app: str
    tasks: list[dict[str, Any]] = field(default_factory=list)
    streams: list[dict[str, str]] = field(default_factory=list)

    def add(self, task_id: str, task_type: str, config: dict[str, Any], *inputs: str | tuple[str, str]) -> str:
        self.tasks.append({"id": task_id, "type": task_type, "config": config})
        for item in inputs:
            parent, port = (item, "in") if isinstance(item, str) else item
            stream = {"from": parent, "to": task_id}
            if port != "in":
                stream["port"] = port
            self.streams.append(stream)
        return task_id

    def sink(self, branch: str, parent: str) -> str:
        """A Publish/BlobUpload sink on a topic unique to this dataflow."""
        return self.add(f"pub_{branch}", "sink", {"topic": f"riot-{self.number}-{self.app.lower()}-{branch}"}, parent)

    def document(self) -> dict[str, Any]:
        if not MIN_TASKS <= len(self.tasks) <= MAX_TASKS:
            raise AssertionError(f"{self.name}: {len(self.tasks)} tasks, outside {MIN_TASKS}-{MAX_TASKS}")
        return {"name": self.name, "owner": "riot-bench", "tasks": self.tasks, "streams": self.streams}


def _window(keys: list[str], aggregates: dict[str, str], window: str, watermark: str) -> dict[str, Any]:
    return {"keys": keys, "time_column": "ts", "window": window, "watermark": watermark, "aggregates": aggregates}


def _source(doc: _Doc, domain: str) -> str:
    return doc.add("src", "source", {"topic": SOURCE_TOPICS[domain], "schema": dict(SOURCE_SCHEMAS[domain])})


def _senml_parse(doc: _Doc, rng: random.Random, domain: str, parent: str) -> str:
    return doc.add("senml_parse", "select", {"columns": dict(rng.choice(_SENML_PARSE[domain]))}, parent)


# -- the four apps --------------------------------------------------------------------


def _etl(doc: _Doc, rng: random.Random, domain: str) -> None:
    """source -> SenMLParse -> RangeFilter [-> BloomFilterCheck] -> Interpolation [-> Join]
    -> Annotation [-> CsvToSenML] -> Publish."""
    parsed = _senml_parse(doc, rng, domain, _source(doc, domain))
    low, high = rng.choice(_RANGES[domain])
    current = doc.add("range_filter", "filter", {"expr": f"value BETWEEN {low} AND {high}"}, parsed)
    extras = rng.choice([(), ("bloom",), ("join",), ("senml",), ("bloom", "senml"), ("join",)])
    if "bloom" in extras:
        current = doc.add("bloom_check", "filter", {"expr": _bloom_set(domain, rng.randrange(4))}, current)
    default = rng.choice(_DEFAULTS)
    current = doc.add("interpolate", "select", {"columns": {
        "msgid": "msgid", "sensor": "sensor", "obstype": "obstype",
        "value": f"coalesce(value, {default})", "unit": "unit", "ts": "ts"}}, current)
    annotation = {"msgid": "msgid", "sensor": "sensor", "obstype": "obstype", "value": "value",
                  "label": f"concat(obstype, ':{rng.choice(_LABELS)}')", "ts": "ts"}
    if "join" in extras:
        quality = doc.add("quality", "select", {"columns": {
            "msgid": "msgid", "quality": "CASE WHEN value IS NULL THEN 'missing' ELSE 'ok' END", "ts": "ts"}}, parsed)
        current = doc.add("join_msg", "join", {"on": ["msgid"], "window": rng.choice(_JOIN_WINDOWS)},
                          (current, "left"), (quality, "right"))
        annotation["quality"] = "quality"
    current = doc.add("annotate", "select", {"columns": annotation}, current)
    if "senml" in extras:
        current = doc.add("csv_to_senml", "select", {"columns": {
            "senml": "concat_ws('|', sensor, obstype, CAST(value AS STRING), label)", "ts": "ts"}}, current)
    doc.sink("etl", current)


def _stats_branch(doc: _Doc, rng: random.Random, branch: str, parent: str) -> None:
    window, watermark = rng.choice(_WINDOWS), rng.choice(_WATERMARKS)
    if branch == "kalman":
        gain, prior = rng.choice(_GAINS), rng.choice(_PRIORS)
        kalman = doc.add("kalman", "select", {"columns": {
            "sensor": "sensor", "obstype": "obstype",
            "est": f"value * {gain} + {round(1 - gain, 2)} * {prior}", "ts": "ts"}}, parent)
        slope, intercept = rng.choice(_SLOPES)
        slr = doc.add("slr", "select", {"columns": {
            "sensor": "sensor", "obstype": "obstype", "est": "est",
            "pred": f"est * {slope} + {intercept}", "ts": "ts"}}, kalman)
        doc.sink("slr", slr)
    elif branch == "moment":
        moment = doc.add("moment", "window_aggregate", _window(
            ["sensor", "obstype"], {"mean": "avg(value)", "peak": "max(value)", "low": "min(value)"}, window, watermark), parent)
        doc.sink("moment", moment)
    elif branch == "distinct":
        count = doc.add("distinct_count", "window_aggregate", _window(["obstype"], {"n": "count(*)"}, window, watermark), parent)
        doc.sink("distinct", count)
    else:  # block window average
        average = doc.add("block_avg", "window_aggregate", _window(
            ["sensor", "obstype"], {"avg_value": "avg(value)"}, window, watermark), parent)
        doc.sink("avg", average)


def _stats(doc: _Doc, rng: random.Random, domain: str) -> None:
    """Either source -> ParseProject -> BloomFilterCheck -> {Kalman -> SLR, SecondOrderMoment,
    DistinctApproxCount} (one or two branches), or the variant source -> SenMLParse ->
    {BlockWindowAverage, Kalman -> SLR, DistinctApproxCount} (one or two branches)."""
    source = _source(doc, domain)
    if rng.random() < 0.6:
        project = doc.add("parse_project", "select", {"columns": dict(rng.choice(_PARSE_PROJECT[domain]))}, source)
        parent = doc.add("bloom_check", "filter", {"expr": _bloom_set(domain, rng.randrange(4))}, project)
        branches = ["kalman", "moment", "distinct"]
    else:
        parent = _senml_parse(doc, rng, domain, source)
        branches = ["block_avg", "kalman", "distinct"]
    for branch in rng.sample(branches, rng.choice([1, 2])):
        _stats_branch(doc, rng, branch, parent)


def _pred(doc: _Doc, rng: random.Random, domain: str) -> None:
    """source -> SenMLParse, model source; (parse x model) -> LinearRegressionPredict
    [-> ErrorEstimation] -> Publish; optionally DecisionTreeClassify or BlockWindowAverage."""
    parsed = _senml_parse(doc, rng, domain, _source(doc, domain))
    models = doc.add("model_src", "source", {"topic": MODEL_TOPICS[domain], "schema": dict(MODEL_SCHEMA)})
    joined = doc.add("model_join", "join", {"on": ["obstype"], "window": rng.choice(_MODEL_JOIN_WINDOWS)},
                     (parsed, "left"), (models, "right"))
    predicted = doc.add("lr_predict", "select", {"columns": {
        "sensor": "sensor", "obstype": "obstype", "value": "value",
        "predicted": "value * slope + intercept", "ts": "ts"}}, joined)
    extra = rng.choice(["none", "error", "classify", "block_avg"])
    if extra == "error":
        error = doc.add("error_est", "select", {"columns": {
            "sensor": "sensor", "obstype": "obstype", "err": "abs(predicted - value)", "ts": "ts"}}, predicted)
        doc.sink("error", error)
    else:
        doc.sink("predict", predicted)
    if extra == "classify":
        margin = rng.choice([0.0, 5.0, 10.0])
        classified = doc.add("dt_classify", "select", {"columns": {
            "sensor": "sensor", "obstype": "obstype",
            "cls": f"CASE WHEN value > split + {margin} THEN 'high' ELSE 'low' END", "ts": "ts"}}, joined)
        doc.sink("classify", classified)
    elif extra == "block_avg":
        _stats_branch(doc, rng, "block_avg", parsed)


def _train(doc: _Doc, rng: random.Random, domain: str) -> None:
    """source -> SenMLParse -> TableRangeQuery -> either LinearRegressionTrain (features ->
    windowed sums [-> slope]) or AnnotateDTClass -> DecisionTreeTrain -> BlobUpload (sink)."""
    parsed = _senml_parse(doc, rng, domain, _source(doc, domain))
    low, high = rng.choice(_RANGES[domain])
    query = doc.add("range_query", "filter", {"expr": f"value >= {low} AND value < {high}"}, parsed)
    window, watermark = rng.choice(_TRAIN_WINDOWS), rng.choice(_WATERMARKS)
    if rng.random() < 0.5:
        features = doc.add("lr_features", "select", {"columns": {
            "obstype": "obstype", "x": "CAST(hour(ts) AS DOUBLE)", "y": "value",
            "xy": "CAST(hour(ts) AS DOUBLE) * value", "xx": "CAST(hour(ts) AS DOUBLE) * CAST(hour(ts) AS DOUBLE)",
            "ts": "ts"}}, query)
        sums = doc.add("lr_train", "window_aggregate", _window(
            ["obstype"], {"n": "count(*)", "sx": "sum(x)", "sy": "sum(y)", "sxy": "sum(xy)", "sxx": "sum(xx)"},
            window, watermark), features)
        if rng.random() < 0.5:
            sums = doc.add("lr_model", "select", {"columns": {
                "obstype": "obstype", "window_end": "window_end",
                "slope": "(n * sxy - sx * sy) / (n * sxx - sx * sx)"}}, sums)
        doc.sink("lr_model", sums)
    else:
        split = rng.choice(_SPLITS)
        labelled = doc.add("dt_annotate", "select", {"columns": {
            "obstype": "obstype", "value": "value",
            "cls": f"CASE WHEN value > {split} THEN 'high' ELSE 'low' END", "ts": "ts"}}, query)
        counts = doc.add("dt_train", "window_aggregate", _window(
            ["obstype", "cls"], {"n": "count(*)", "mean": "avg(value)"}, window, watermark), labelled)
        doc.sink("dt_model", counts)


_BUILDERS = {"ETL": _etl, "STATS": _stats, "PRED": _pred, "TRAIN": _train}


def riot_dataflow(number: int, seed: int = 0) -> dict[str, Any]:
    """The ``number``-th dataflow of workload ``seed``: same arguments, same document.

    Its sink topics contain ``number``, so dataflows with different numbers never
    write the same topic.

    >>> doc = riot_dataflow(3, seed=1)
    >>> doc == riot_dataflow(3, seed=1), 4 <= len(doc["tasks"]) <= 8
    (True, True)
    """
    rng = random.Random(seed * 1_000_003 + number)
    app = rng.choices(APPS, APP_WEIGHTS)[0]
    domain = rng.choice(list(SOURCE_SCHEMAS))
    doc = _Doc(name=f"{app.lower()}-{domain}-{number}", number=number, app=app)
    _BUILDERS[app](doc, rng, domain)
    return doc.document()


def riot_workload(count: int, seed: int = 0, start: int = 0) -> Iterator[dict[str, Any]]:
    """Dataflows ``start`` .. ``start + count - 1`` of workload ``seed``."""
    for number in range(start, start + count):
        yield riot_dataflow(number, seed)


def cross_source_dataflow(number: int, left: str = "grid", right: str = "urban", window: str = "1 minute") -> dict[str, Any]:
    """Grid load beside urban observations, minute by minute: a join across two sources.

    Not part of :func:`riot_workload` (RIoTBench apps read one sensor source); the
    reuse paper's motivating example (weather vs. solar output). Its two parse
    tasks are the workload's, so it connects two running DAGs.
    """
    doc = _Doc(name=f"cross-{left}-{right}-{number}", number=number, app="CROSS")
    sides = []
    for side, domain in (("l", left), ("r", right)):
        source = doc.add(f"src_{side}", "source", {"topic": SOURCE_TOPICS[domain], "schema": dict(SOURCE_SCHEMAS[domain])})
        parsed = doc.add(f"parse_{side}", "select", {"columns": dict(_SENML_PARSE[domain][0])}, source)
        sides.append(doc.add(f"minute_{side}", "select", {"columns": {
            "minute": "CAST(unix_timestamp(ts) / 60 AS BIGINT)", f"{domain}_value": "value", "ts": "ts"}}, parsed))
    joined = doc.add("by_minute", "join", {"on": ["minute"], "window": window}, (sides[0], "left"), (sides[1], "right"))
    doc.sink("cross", joined)
    return doc.document()


# -- the reuse paper's construction ------------------------------------------------------
#
# The paper's 21 apps are "permutations" of RIoTBench's DAGs built "from the
# available tasks": 138 tasks, 19 distinct, 75 running at the SEQ peak with
# reuse. Its apps are not published. What the numbers say is that a task kind
# has one config (a RIoTBench task reads one properties file), so apps differ in
# which tasks they chain and in what order, not in parameters. The apps below
# are built that way: every task kind has exactly one config, over the parsed
# observation {msgid, sensor, obstype, value, unit, ts} of any source, and seven
# app shapes run over each of the three sources. The shapes were chosen to give
# the paper's three numbers (138 tasks, 19 distinct (type, config) pairs besides
# the sinks, 75 distinct signatures with all 21 running), as benchmarks.opmw is
# calibrated to the OPMW numbers. Every app still writes its own sink topics.

_OBSERVATION = {"msgid": "msgid", "sensor": "sensor", "obstype": "obstype", "value": "value", "unit": "unit", "ts": "ts"}
PAPER_TASKS: dict[str, tuple[str, dict[str, Any]]] = {
    "range_filter": ("filter", {"expr": "value BETWEEN -50 AND 1000"}),
    # a membership test on a hash of the sensor id, as a bloom filter answers it (about 3 in 4 pass)
    "bloom_check": ("filter", {"expr": "substring(md5(sensor), 1, 1) NOT IN ('0', '1', '2', '3')"}),
    "interpolate": ("select", {"columns": {**_OBSERVATION, "value": "coalesce(value, 0.0)"}}),
    "annotate": ("select", {"columns": {**_OBSERVATION, "label": "concat(obstype, ':', unit)"}}),
    "csv_to_senml": ("select", {"columns": {
        "senml": "concat_ws('|', sensor, obstype, CAST(value AS STRING), label)", "ts": "ts"}}),
    "kalman": ("select", {"columns": {"sensor": "sensor", "obstype": "obstype", "est": "value * 0.4 + 0.6 * 20.0",
                                      "ts": "ts"}}),
    "slr": ("select", {"columns": {"sensor": "sensor", "obstype": "obstype", "est": "est", "pred": "est * 1.1 - 0.5",
                                   "ts": "ts"}}),
    "moment": ("window_aggregate", _window(["sensor", "obstype"], {
        "mean": "avg(value)", "peak": "max(value)", "low": "min(value)"}, "1 minute", "10 seconds")),
    "distinct_count": ("window_aggregate", _window(["obstype"], {"n": "count(*)"}, "1 minute", "10 seconds")),
    "block_avg": ("window_aggregate", _window(["sensor", "obstype"], {"avg_value": "avg(value)"},
                                              "1 minute", "10 seconds")),
    "lr_predict": ("select", {"columns": {"sensor": "sensor", "obstype": "obstype", "value": "value",
                                          "predicted": "value * 0.9 + 0.5", "ts": "ts"}}),
    "error_est": ("select", {"columns": {"sensor": "sensor", "obstype": "obstype", "err": "abs(predicted - value)",
                                         "ts": "ts"}}),
    "dt_classify": ("select", {"columns": {"sensor": "sensor", "obstype": "obstype",
                                           "cls": "CASE WHEN value > 25.0 THEN 'high' ELSE 'low' END", "ts": "ts"}}),
}
# (RIoTBench app, paths after SenMLParse): the paths of one app share their common prefix;
# each path ends in a sink.
PAPER_SHAPES: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    ("ETL", (("range_filter", "bloom_check", "interpolate", "annotate", "csv_to_senml"),)),
    ("ETL", (("range_filter", "bloom_check", "interpolate", "annotate"),)),
    ("PRED", (("range_filter", "interpolate", "dt_classify"),)),
    ("STATS", (("bloom_check", "kalman", "slr"),)),
    ("STATS", (("bloom_check", "moment"), ("bloom_check", "distinct_count"))),
    ("PRED", (("range_filter", "lr_predict", "error_est"),)),
    ("STATS", (("range_filter", "interpolate", "block_avg"),)),
)
PAPER_APPS = len(PAPER_SHAPES) * len(SOURCE_SCHEMAS)


def paper_dataflow(number: int) -> dict[str, Any]:
    """App ``number`` (0-20) of the paper's construction: shape ``number % 7`` over source ``number // 7``.

    >>> [len(paper_dataflow(n)["tasks"]) for n in range(7)]
    [8, 7, 6, 6, 7, 6, 6]
    """
    if not 0 <= number < PAPER_APPS:
        raise ValueError(f"the paper's construction has apps 0-{PAPER_APPS - 1}, not {number}")
    app, paths = PAPER_SHAPES[number % len(PAPER_SHAPES)]
    domain = list(SOURCE_SCHEMAS)[number // len(PAPER_SHAPES)]
    doc = _Doc(name=f"paper-{app.lower()}-{domain}-{number}", number=number, app=app)
    _source(doc, domain)
    doc.add("senml_parse", "select", {"columns": dict(_SENML_PARSE[domain][0])}, "src")
    for path in paths:
        parent = "senml_parse"
        for kind in path:
            if not any(task["id"] == kind for task in doc.tasks):
                task_type, config = PAPER_TASKS[kind]
                doc.add(kind, task_type, config, parent)
            parent = kind
        doc.add(f"pub_{parent}", "sink", {"topic": f"riot-paper-{number}-{parent}"}, parent)
    return doc.document()


def paper_workload() -> list[dict[str, Any]]:
    """The 21 apps of the paper's construction, grid's first."""
    return [paper_dataflow(number) for number in range(PAPER_APPS)]


# -- self-check -------------------------------------------------------------------------


def check(count: int, seed: int = 0) -> dict[str, Any]:
    """Validate ``count`` dataflows with the manager's own parser and summarize the sharing.

    ``distinct_tasks`` is what would run with every dataflow submitted at once
    (docs/architecture.md, "Guarantees": the number of distinct signatures, as every task reaches a sink).
    """
    from manager.validate import parse_dataflow

    apps: Counter[str] = Counter()
    sizes: Counter[int] = Counter()
    types: Counter[str] = Counter()
    topics: set[str] = set()
    signatures: set[str] = set()
    parse_signatures: set[str] = set()
    bloom_behind: dict[str, set[str]] = {"range_filter": set(), "parse_project": set()}
    submitted = 0
    for document in riot_workload(count, seed):
        flow = parse_dataflow(document)
        apps[document["name"].split("-")[0].upper()] += 1
        sizes[len(flow.tasks)] += 1
        submitted += len(flow.tasks)
        parent_of = {stream.dst: stream.src for stream in flow.streams}
        for task_id, task in flow.tasks.items():
            types[task.type] += 1
            signatures.add(flow.signatures[task_id])
            if task_id in ("senml_parse", "parse_project"):
                parse_signatures.add(flow.signatures[task_id])
            if task_id == "bloom_check":
                bloom_behind[parent_of[task_id]].add(flow.signatures[task_id])
            if task.type == "sink":
                if task.config["topic"] in topics:
                    raise AssertionError(f"{flow.name}: sink topic {task.config['topic']!r} is used by another dataflow")
                topics.add(task.config["topic"])
    # ETL's and STATS' bloom checks may carry equal configs, but never share a signature.
    if bloom_behind["range_filter"] & bloom_behind["parse_project"]:
        raise AssertionError("an ETL bloom check (behind RangeFilter) shares a signature with a STATS one")
    return {
        "dataflows": count,
        "apps": dict(sorted(apps.items())),
        "tasks_per_dataflow": dict(sorted(sizes.items())),
        "task_types": dict(sorted(types.items())),
        "submitted_tasks": submitted,
        "distinct_tasks": len(signatures),
        "saving_percent": round(100 * (submitted - len(signatures)) / submitted, 1),
        "distinct_parse_tasks": len(parse_signatures),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Validate and summarize generated RIoTBench-style dataflows.")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for key, value in check(args.count, args.seed).items():
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
