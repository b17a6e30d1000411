"""A seeded generator of synthetic workflows shaped like the reuse paper's OPMW set (docs/reuse.md, "Workloads").

The paper (section 5.1) ran 35 scientific workflows from the OPMW repository:
2-38 tasks each, 471 tasks in all, "of which 219 are unique", with every
task's logic replaced by an iterative computation of pi per event. Its reuse
manager ran 274 tasks at the peak of the sequential trace (section 5.3), with
all 35 submitted. Both numbers hold together only if "unique" counts abstract
tasks (type and config, whatever their ancestors: the paper's section 3.1) and
274 is the number of ancestor-distinct tasks, what reuse runs at best; the
RIoT workload reads the same way (19 distinct tasks, 75 running at peak).
The originals are not available offline, so this module generates 35 workflows
with exactly 471 tasks, and parameters calibrated so that, averaged over seeds
0-7, all 35 running share down to 274 distinct signatures (the manager's
``running_tasks`` with sharing on) and hold 217 distinct (type, config) pairs.
Seed 0, the default, has 279 and 211; ``python -m benchmarks.opmw --check``
prints a seed's exact numbers.

How a workload is generated (the constants below):

- Sizes. ``WORKFLOWS`` sizes in ``[MIN_TASKS, MAX_TASKS]`` that add up to
  ``TOTAL_TASKS``: one of each extreme, the others log-normal around
  ``SIZE_MEDIAN`` (spread ``SIZE_SIGMA``), then nudged one task at a time, at
  random, until the sum is exact.
- Domains. Each workflow belongs to one of ``DOMAINS`` (name, number of
  workflows). A domain has one source topic ``opmw-<domain>`` (``SOURCE_SCHEMA``,
  with a ``ts`` column as RIoT's sources have), a *trunk* of ``TRUNK_STAGES``
  stages, each one component or, with probability ``DIAMOND_SHARE``, a diamond
  (two components after the previous stage, then a ``union`` of both), with
  ``VARIANTS`` alternatives for the (first) component of every stage, and a
  *library* of ``LIBRARY_SIZE`` components for the rest of its workflows.
- Prefix. A workflow of n tasks starts with its domain's source and as many
  trunk stages as fit in ``round(share * (n - 2))`` tasks, with ``share``
  uniform in ``PREFIX_SHARE``: workflows of a domain share a source and a
  common prefix, the shorter prefix being part of the longer one. With
  probability ``VARIANT_PROBABILITY`` one stage of the prefix uses one of its
  alternatives instead, so sharing stops there (equal configs behind it are
  not shared: their ancestors differ).
- Body. The remaining tasks grow from the end of the prefix as a DAG of open
  ends: extend an end by a library component, fork an end into two (fan-out),
  start a branch at an earlier prefix task (a skip), join two ends with a
  ``union`` (fan-in), or close an end with a sink (weights ``BODY_MOVES``).
  Every open end gets a sink at the end. Children of one task are distinct
  components, so no workflow contains two equivalent tasks.
- Sinks write ``opmw-<number>-<k>``: topics unique to the workflow.
- Shape. :class:`Shape` holds what decides how workflows share: the
  domains, the prefix, variants, versions and the library. :data:`TOTALS`
  (the default) is the calibration above. :data:`HISTOGRAM_SHAPE` is
  calibrated to the paper's SEQ reuse histogram as well: one domain, a
  trunk of 4 stages every workflow takes, and later versions of workflows
  that repeat the first moves of their predecessor's body.

A component is a ``select`` that replaces ``value`` by ``w * value`` plus a
Nilakantha partial sum for pi over ``terms`` terms, offset by the fractional
part of the value (``terms`` in ``PI_TERMS``: the CPU cost of a record), or,
with probability ``FILTER_SHARE``, a ``filter`` ``value % 1 < keep`` (keeps
about that fraction). Each component has a unique ``code`` that sets ``w``
(0.5-0.72, so values stay bounded along a chain) or ``keep`` (0.75-0.97), so
different components have different configs. Every task keeps the source's four
columns, so any two branches can be joined by a ``union``. No keyed operator
(``join``, ``window_aggregate``) is used: the paper's tasks are stateless.

Usage::

    from benchmarks.opmw import opmw_dataflow, opmw_workload
    documents = opmw_workload(seed=0)       # the 35 documents
    document = opmw_dataflow(7, seed=0)     # the 8th of them
    shaped = opmw_workload(HISTOGRAM_SEED, HISTOGRAM_SHAPE)   # opmw-hist

    python -m benchmarks.opmw --check [--seed 0] [--shape histogram]   # validate and summarize
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

WORKFLOWS, MIN_TASKS, MAX_TASKS, TOTAL_TASKS = 35, 2, 38, 471
SIZE_MEDIAN, SIZE_SIGMA = 10.0, 0.75
DOMAINS: tuple[tuple[str, int], ...] = (
    ("text", 9), ("genomics", 7), ("hydrology", 6), ("drugs", 5), ("social", 4), ("imaging", 4),
)
TRUNK_STAGES = 16
DIAMOND_SHARE = 0.15
VARIANTS = 2
LIBRARY_SIZE = 80
PREFIX_SHARE = (0.8, 1.0)
VARIANT_PROBABILITY = 0.35
BODY_MOVES: dict[str, float] = {"extend": 0.55, "fork": 0.15, "skip": 0.1, "join": 0.15, "close": 0.05}
FILTER_SHARE = 0.25
PI_TERMS = (3, 8)
SOURCE_SCHEMA: dict[str, str] = {"msgid": "string", "station": "string", "value": "double", "ts": "timestamp"}

_CODES_PER_DOMAIN = 1000
_VARIANT_BASE, _SIDE_BASE, _LIBRARY_BASE = 100, 200, 300


@dataclass(frozen=True)
class Shape:
    """How the workflows of a workload share: the parameters above, and those a hub-shaped workload adds.

    ``domains`` are some of :data:`DOMAINS` (their names keep their components), with counts adding up to
    ``WORKFLOWS``. ``trunk``: with a number, every workflow of a domain takes that many trunk stages (as
    many as fit), so the trunk is common to the whole domain; with None, a share of the workflow's size
    (``prefix_share``). ``versions``: the probability that a workflow whose predecessor in its domain is not
    a version itself is a later version of it; a version repeats the first ``version_share`` of its
    predecessor's body moves (same components, same shape), then grows its own. ``library``: components per
    domain for the bodies.

    Raises ``ValueError`` for domains outside :data:`DOMAINS`, counts that do not add up, or a library
    larger than a domain's code range.
    """

    domains: tuple[tuple[str, int], ...] = DOMAINS
    trunk: int | None = None
    prefix_share: tuple[float, float] = PREFIX_SHARE
    variant_probability: float = VARIANT_PROBABILITY
    versions: float = 0.0
    version_share: tuple[float, float] = (0.0, 0.0)
    library: int = LIBRARY_SIZE

    def __post_init__(self) -> None:
        unknown = sorted({name for name, _ in self.domains} - {name for name, _ in DOMAINS})
        if unknown:
            raise ValueError(f"unknown OPMW domains {unknown}; choose among {[name for name, _ in DOMAINS]}")
        if sum(count for _, count in self.domains) != WORKFLOWS:
            raise ValueError(f"the domains hold {sum(count for _, count in self.domains)} workflows, not {WORKFLOWS}")
        if not 1 <= self.library <= _CODES_PER_DOMAIN - _LIBRARY_BASE:
            raise ValueError(f"library {self.library} is outside 1-{_CODES_PER_DOMAIN - _LIBRARY_BASE}")


#: The workload calibrated to the paper's totals (the module docstring).
TOTALS = Shape()
#: The workload calibrated to the paper's totals and to its SEQ reuse histogram as well (docs/reuse.md, "OPMW
#: shaped by the paper's histogram"): one source stream for all 35 workflows, a trunk of 4 stages they all take,
#: later versions of workflows (each non-version's successor with probability 0.7, repeating 60-100 % of its
#: body), and a library of 320 components. Seed 1 is the one of seeds 0-7 whose peak is the paper's 274 running
#: tasks.
HISTOGRAM_SHAPE = Shape(domains=(("text", WORKFLOWS),), trunk=4, variant_probability=0.0, versions=0.7,
                        version_share=(0.6, 1.0), library=320)
HISTOGRAM_SEED = 1

if sum(count for _, count in DOMAINS) != WORKFLOWS:
    raise AssertionError("DOMAINS must hold WORKFLOWS workflows")


def source_topic(domain: str) -> str:
    return f"opmw-{domain}"


def pi_expression(terms: int, weight: float) -> str:
    """``weight * value`` plus ``terms`` terms of Nilakantha's series for pi, offset by ``value % 1``.

    >>> pi_expression(2, 0.5)
    '0.5 * value + 3 + 4 / ((2 + value % 1) * (3 + value % 1) * (4 + value % 1)) - 4 / ((4 + value % 1) * (5 + value % 1) * (6 + value % 1))'
    """
    offset = "value % 1"
    series = "".join(
        f" {'+' if k % 2 else '-'} 4 / (({2 * k} + {offset}) * ({2 * k + 1} + {offset}) * ({2 * k + 2} + {offset}))"
        for k in range(1, terms + 1)
    )
    return f"{weight:g} * value + 3{series}"


def component(code: int) -> tuple[str, dict[str, Any]]:
    """The (type, config) of component ``code``: a pi ``select`` or a ``filter``, the same for every seed.

    >>> component(1)
    ('filter', {'expr': 'value % 1 < 0.75004'})
    >>> kind, config = component(2)
    >>> kind, config["columns"]["value"].startswith("0.50008 * value + 3 + 4 / ((2 + value % 1)")
    ('select', True)
    """
    rng = random.Random(code)
    if rng.random() < FILTER_SHARE:
        return "filter", {"expr": f"value % 1 < {0.75 + code / 25_000:g}"}
    terms = rng.randint(*PI_TERMS)
    columns = {"msgid": "msgid", "station": "station", "value": pi_expression(terms, 0.5 + code / 25_000), "ts": "ts"}
    return "select", {"columns": columns}


def _trunk_code(domain: int, position: int) -> int:
    return domain * _CODES_PER_DOMAIN + position


def _variant_code(domain: int, position: int, variant: int) -> int:
    return domain * _CODES_PER_DOMAIN + _VARIANT_BASE + position * VARIANTS + variant


def _side_code(domain: int, stage: int) -> int:
    return domain * _CODES_PER_DOMAIN + _SIDE_BASE + stage


def _library_code(domain: int, index: int) -> int:
    return domain * _CODES_PER_DOMAIN + _LIBRARY_BASE + index


@lru_cache(maxsize=64)
def workload_plan(seed: int = 0, shape: Shape = TOTALS) -> tuple[tuple[str, int], ...]:
    """(domain, size) of every workflow of workload ``seed``, in workflow order.

    >>> plan = workload_plan(0)
    >>> len(plan), sum(size for _, size in plan), min(size for _, size in plan), max(size for _, size in plan)
    (35, 471, 2, 38)
    """
    rng = random.Random(seed)
    sizes = [MIN_TASKS, MAX_TASKS]
    sizes += [min(MAX_TASKS, max(MIN_TASKS, round(rng.lognormvariate(math.log(SIZE_MEDIAN), SIZE_SIGMA))))
              for _ in range(WORKFLOWS - 2)]
    while sum(sizes) != TOTAL_TASKS:
        step = 1 if sum(sizes) < TOTAL_TASKS else -1
        index = rng.randrange(2, WORKFLOWS)
        if MIN_TASKS <= sizes[index] + step <= MAX_TASKS:
            sizes[index] += step
    rng.shuffle(sizes)
    domains = [name for name, count in shape.domains for _ in range(count)]
    rng.shuffle(domains)
    return tuple(zip(domains, sizes))


@dataclass
class _Doc:
    """A workflow under construction: tasks in order, streams, and the components used after each task."""

    name: str
    number: int
    tasks: list[dict[str, Any]] = field(default_factory=list)
    streams: list[dict[str, str]] = field(default_factory=list)
    children: dict[str, set[int]] = field(default_factory=dict)

    def add(self, task_id: str, task_type: str, config: dict[str, Any], *parents: str) -> str:
        self.tasks.append({"id": task_id, "type": task_type, "config": config})
        self.streams.extend({"from": parent, "to": task_id} for parent in parents)
        return task_id

    def component(self, task_id: str, code: int, parent: str) -> str:
        self.children.setdefault(parent, set()).add(code)
        return self.add(task_id, *component(code), parent)

    def sink(self, parent: str) -> str:
        count = sum(1 for task in self.tasks if task["type"] == "sink") + 1
        return self.add(f"out{count}", "sink", {"topic": f"opmw-{self.number}-{count}"}, parent)

    def document(self) -> dict[str, Any]:
        return {"name": self.name, "owner": "opmw", "tasks": self.tasks, "streams": self.streams}


def _trunk(domain: int) -> list[str]:
    """The kind of each trunk stage of ``domain``: ``"one"`` component, or a ``"diamond"``.

    A diamond is two components after the previous stage and a ``union`` of them.
    """
    rng = random.Random(f"trunk-{domain}")
    return ["diamond" if rng.random() < DIAMOND_SHARE else "one" for _ in range(TRUNK_STAGES)]


def opmw_dataflow(number: int, seed: int = 0, shape: Shape = TOTALS) -> dict[str, Any]:
    """Workflow ``number`` (0-34) of workload ``seed``: same arguments, same document.

    >>> doc = opmw_dataflow(4, seed=0)
    >>> doc == opmw_dataflow(4, seed=0), doc["name"] == f"opmw-{workload_plan(0)[4][0]}-4"
    (True, True)
    """
    plan = workload_plan(seed, shape)
    domain, size = plan[number]
    domain_index = [name for name, _ in DOMAINS].index(domain)
    rng = random.Random(seed * 1_000_003 + number)
    doc = _Doc(name=f"opmw-{domain}-{number}", number=number)
    chain = [doc.add("src", "source", {"topic": source_topic(domain), "schema": dict(SOURCE_SCHEMA)})]
    stages, variant = _prefix(shape, domain_index, size, rng)
    prefix = 0
    for stage, kind in enumerate(stages):
        code = (_variant_code(domain_index, stage, variant[1]) if variant and variant[0] == stage
                else _trunk_code(domain_index, stage))
        first = doc.component(f"p{stage + 1:02d}", code, chain[-1])
        if kind == "diamond":
            second = doc.component(f"p{stage + 1:02d}s", _side_code(domain_index, stage), chain[-1])
            chain.append(doc.add(f"p{stage + 1:02d}u", "union", {}, first, second))
            prefix += 3
        else:
            chain.append(first)
            prefix += 1
    lineage, repeated = _lineage(number, seed, shape, rng)
    _body(doc, rng, domain_index, chain, budget=size - 1 - prefix, repeat=(lineage, repeated), library=shape.library)
    return doc.document()


def _prefix(shape: Shape, domain: int, size: int, rng: random.Random) -> tuple[list[str], tuple[int, int] | None]:
    """The trunk stages a workflow of ``size`` tasks starts with, and the stage it swaps for a variant, if any."""
    wanted = shape.trunk * 3 if shape.trunk is not None else round(rng.uniform(*shape.prefix_share) * (size - 2))
    wanted = min(wanted, size - 2)
    stages: list[str] = []
    for kind in _trunk(domain):
        cost = 3 if kind == "diamond" else 1
        if (shape.trunk is not None and len(stages) == shape.trunk
                or sum(3 if taken == "diamond" else 1 for taken in stages) + cost > wanted):
            break
        stages.append(kind)
    variant = None
    if stages and rng.random() < shape.variant_probability:
        variant = (rng.randrange(len(stages)), rng.randrange(VARIANTS))
    return stages, variant


def _lineage(number: int, seed: int, shape: Shape, rng: random.Random) -> tuple[random.Random | None, float]:
    """For a later version of a workflow: the random stream its body moves start from (its predecessor's) and
    the share of them it repeats; else (None, 0). A version's predecessor is the workflow before it in its
    domain, which is not a version itself."""
    if not shape.versions:
        return None, 0.0
    plan = workload_plan(seed, shape)
    domain = plan[number][0]
    before = [other for other in range(number) if plan[other][0] == domain]
    if not _is_version(number, seed, shape):
        return None, 0.0
    lineage = random.Random(seed * 1_000_003 + before[-1])
    _prefix(shape, [name for name, _ in DOMAINS].index(domain), plan[before[-1]][1], lineage)
    return lineage, rng.uniform(*shape.version_share)


def _is_version(number: int, seed: int, shape: Shape) -> bool:
    plan = workload_plan(seed, shape)
    before = [other for other in range(number) if plan[other][0] == plan[number][0]]
    return bool(before) and not _is_version(before[-1], seed, shape) and \
        random.Random(f"version-{seed}-{number}").random() < shape.versions


def _body(doc: _Doc, rng: random.Random, domain: int, chain: list[str], budget: int,
          repeat: tuple[random.Random | None, float] = (None, 0.0), library: int = LIBRARY_SIZE) -> None:
    """Grow ``budget`` tasks (sinks included) from the end of ``chain``: see the module docstring. With
    ``repeat`` (a predecessor's random stream, a share), the first moves draw from that stream, so a version
    grows what its predecessor grew for as long as their budgets allow the same moves."""
    heads = [chain[-1]]
    count = moves = 0
    lineage, share = repeat
    repeated = round(share * budget) if lineage is not None else 0

    def grow(parent: str, draw: random.Random) -> str:
        nonlocal count
        count += 1
        used = doc.children.get(parent, set())
        code = draw.choice([c for c in (_library_code(domain, i) for i in range(library)) if c not in used])
        return doc.component(f"b{count:02d}", code, parent)

    unions = 0
    while budget > len(heads):
        draw = lineage if moves < repeated else rng
        moves += 1
        room = budget - len(heads)
        allowed = {"extend": room >= 1, "fork": room >= 3, "skip": room >= 2 and len(chain) > 1,
                   "join": len(heads) >= 2, "close": len(heads) >= 2}
        names = [name for name, ok in allowed.items() if ok]
        move = draw.choices(names, [BODY_MOVES[name] for name in names])[0]
        if move == "extend":
            index = draw.randrange(len(heads))
            heads[index] = grow(heads[index], draw)
            budget -= 1
        elif move == "fork":
            parent = heads.pop(draw.randrange(len(heads)))
            heads += [grow(parent, draw), grow(parent, draw)]
            budget -= 2
        elif move == "skip":
            heads.append(grow(draw.choice(chain[:-1]), draw))
            budget -= 1
        elif move == "join":
            first, second = draw.sample(range(len(heads)), 2)
            parents = [heads[first], heads[second]]
            heads = [head for index, head in enumerate(heads) if index not in (first, second)]
            unions += 1
            heads.append(doc.add(f"u{unions:02d}", "union", {}, *parents))
            budget -= 1
        else:
            doc.sink(heads.pop(draw.randrange(len(heads))))
            budget -= 1
    for head in heads:
        doc.sink(head)


def record_maker(topic: str, seed: int):
    """``make(i, at)``: the ``i``-th record of an ``opmw-<domain>`` source topic with event time ``at`` (seeded).

    Values are uniform in [0, 100), so ``value % 1`` (what the filters test and the pi terms offset by) is
    uniform in [0, 1).

    >>> from datetime import datetime, timezone
    >>> first = record_maker("opmw-text", 1)(0, datetime(2026, 1, 1, tzinfo=timezone.utc))
    >>> sorted(first) == sorted(SOURCE_SCHEMA), first["station"].startswith("text-")
    (True, True)
    """
    from runtime.workload import iso

    domain = topic.removeprefix("opmw-")
    if topic != source_topic(domain) or domain not in dict(DOMAINS):
        raise ValueError(f"{topic!r} is not an OPMW source topic ({', '.join(source_topic(name) for name, _ in DOMAINS)})")
    rng = random.Random(seed)

    def make(i: int, at) -> dict[str, Any]:
        return {"msgid": f"{domain}-{i}", "station": f"{domain}-{rng.randrange(20):02d}",
                "value": round(rng.uniform(0.0, 100.0), 4), "ts": iso(at)}

    return make


def opmw_workload(seed: int = 0, shape: Shape = TOTALS) -> list[dict[str, Any]]:
    """The ``WORKFLOWS`` documents of workload ``seed``."""
    return [opmw_dataflow(number, seed, shape) for number in range(WORKFLOWS)]


# -- self-check -------------------------------------------------------------------------


def check(seed: int = 0, shape: Shape = TOTALS) -> dict[str, Any]:
    """Validate the workload with the manager's own parser and summarize its shape and sharing.

    ``distinct_signatures`` is what runs with every workflow submitted (the
    manager runs one task per distinct signature); ``distinct_abstract_tasks``
    counts distinct (type, canonical config) pairs, the paper's "unique" tasks.
    """
    from manager.validate import parse_dataflow

    sizes: list[int] = []
    types: Counter[str] = Counter()
    topics: set[str] = set()
    signatures: set[str] = set()
    abstract: set[str] = set()
    fan_in = fan_out = sinks = 0
    for document in opmw_workload(seed, shape):
        flow = parse_dataflow(document)
        if len(set(flow.signatures.values())) != len(flow.tasks):
            raise AssertionError(f"{flow.name}: two equivalent tasks in one workflow")
        sizes.append(len(flow.tasks))
        inputs = Counter(stream.dst for stream in flow.streams)
        outputs = Counter(stream.src for stream in flow.streams)
        fan_in += sum(1 for count in inputs.values() if count > 1)
        fan_out += sum(1 for count in outputs.values() if count > 1)
        for task_id, task in flow.tasks.items():
            types[task.type] += 1
            signatures.add(flow.signatures[task_id])
            abstract.add(json.dumps([task.type, task.config], sort_keys=True))
            if task.type == "sink":
                sinks += 1
                if task.config["topic"] in topics:
                    raise AssertionError(f"{flow.name}: sink topic {task.config['topic']!r} is used by another workflow")
                topics.add(task.config["topic"])
    submitted = sum(sizes)
    return {
        "workflows": len(sizes),
        "tasks": submitted,
        "distinct_signatures": len(signatures),
        "distinct_abstract_tasks": len(abstract),
        "saving_percent": round(100 * (submitted - len(signatures)) / submitted, 1),
        "sizes": sorted(sizes),
        "size_histogram": {f"{low}-{low + 4}": sum(1 for size in sizes if low <= size <= low + 4)
                           for low in range(0, MAX_TASKS + 1, 5)},
        "task_types": dict(sorted(types.items())),
        "sinks": sinks,
        "fan_in_tasks": fan_in,
        "fan_out_tasks": fan_out,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Validate and summarize the OPMW-like workload.")
    parser.add_argument("--check", action="store_true", help="validate every document and print the summary")
    parser.add_argument("--seed", type=int, default=None, help=f"default 0, or {HISTOGRAM_SEED} with --shape histogram")
    parser.add_argument("--shape", choices=["totals", "histogram"], default="totals",
                        help="calibrated to the paper's totals (default), or to its reuse histogram too")
    parser.add_argument("--json", action="store_true", help="print the 35 documents as a JSON list instead")
    args = parser.parse_args(argv)
    shape = TOTALS if args.shape == "totals" else HISTOGRAM_SHAPE
    if args.seed is None:
        args.seed = 0 if args.shape == "totals" else HISTOGRAM_SEED
    if args.json:
        print(json.dumps(opmw_workload(args.seed, shape), indent=1))
        return 0
    for key, value in check(args.seed, shape).items():
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
