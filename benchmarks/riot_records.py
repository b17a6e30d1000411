"""Input records for the RIoTBench-style apps of :mod:`benchmarks.riot`, schema for schema.

The demo generators of :mod:`runtime.workload` emit their own columns; the
apps read the SenML-like schemas of ``benchmarks.riot.SOURCE_SCHEMAS``. These
records fill every column the apps use, with sensor ids that the bloom
filters' sets contain (most, not all: ids run past the sets), values across
the range filters' bounds, and, on the model topics, one model per
observation type the parse tasks produce.

>>> make = record_maker("riot-grid", seed=1)
>>> first = make(0, datetime(2026, 1, 1, tzinfo=timezone.utc))
>>> sorted(first) == sorted(SOURCE_SCHEMAS["grid"]), first["meter"].startswith("meter-")
(True, True)
>>> sorted(record_maker("riot-taxi-models", 1)(0, datetime(2026, 1, 1, tzinfo=timezone.utc))) == sorted(MODEL_SCHEMA)
True
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from benchmarks.riot import MODEL_TOPICS, SOURCE_TOPICS
from runtime.workload import iso

ENTITIES = 40  # the bloom sets cover ids 000-031
OBSERVATIONS = {
    "grid": {"load": ("kw", 0.0, 60.0), "voltage": ("v", 200.0, 260.0), "current": ("a", 0.0, 40.0)},
    "urban": {"temp": ("c", -10.0, 45.0), "humidity": ("pct", 0.0, 100.0), "light": ("lux", 0.0, 900.0),
              "dust": ("ugm3", 0.0, 150.0)},
    "taxi": {"fare": ("usd", 2.5, 80.0), "distance": ("mile", 0.1, 25.0), "speed": ("mph", 2.0, 45.0)},
}

Maker = Callable[[int, datetime], dict[str, Any]]


def record_maker(topic: str, seed: int) -> Maker:
    """``make(i, at)``: the ``i``-th record of ``topic`` with event time ``at`` (seeded)."""
    rng = random.Random(seed)
    for domain, name in MODEL_TOPICS.items():
        if topic == name:
            return _models(rng, domain)
    for domain, name in SOURCE_TOPICS.items():
        if topic == name:
            return _MAKERS[domain](rng)
    raise ValueError(f"{topic!r} is not a RIoT source or model topic ({sorted(SOURCE_TOPICS.values())})")


def _observation(rng: random.Random, domain: str) -> tuple[str, str, float]:
    obstype = rng.choice(list(OBSERVATIONS[domain]))
    unit, low, high = OBSERVATIONS[domain][obstype]
    return obstype, unit, round(rng.uniform(low, high), 2)


def _grid(rng: random.Random) -> Maker:
    def make(i: int, at: datetime) -> dict[str, Any]:
        entity = rng.randrange(ENTITIES)
        obstype, unit, value = _observation(rng, "grid")
        return {"msgid": f"g{i}", "meter": f"meter-{entity:03d}", "house": f"h{entity // 4:02d}", "obstype": obstype,
                "v": str(value), "unit": unit, "ts": iso(at)}
    return make


def _urban(rng: random.Random) -> Maker:
    def make(i: int, at: datetime) -> dict[str, Any]:
        entity = rng.randrange(ENTITIES)
        obstype, unit, value = _observation(rng, "urban")
        return {"msgid": f"u{i}", "sensor": f"sys-{entity:03d}", "city": rng.choice(("bangalore", "chicago")),
                "obstype": obstype, "v": str(value), "unit": unit, "lat": round(12.9 + entity / 1000, 4),
                "lon": round(77.5 + entity / 1000, 4), "ts": iso(at)}
    return make


def _taxi(rng: random.Random) -> Maker:
    def make(i: int, at: datetime) -> dict[str, Any]:
        entity = rng.randrange(ENTITIES)
        distance = round(rng.lognormvariate(1.0, 0.7), 2)
        fare = round(2.5 + 1.6 * distance + rng.uniform(0, 3), 2)
        tip, tolls = round(fare * rng.choice((0, 0.1, 0.15, 0.2)), 2), rng.choice((0.0, 0.0, 5.76))
        return {"msgid": f"t{i}", "medallion": f"cab-{entity:03d}", "hack_license": f"hl{entity:04d}",
                "pickup_zone": f"z{rng.randrange(12):02d}", "trip_time_s": int(120 + distance * 150 * rng.uniform(0.7, 1.5)),
                "trip_distance": distance, "fare": fare, "tip": tip, "tolls": tolls,
                "total": round(fare + tip + tolls, 2), "ts": iso(at)}
    return make


def _models(rng: random.Random, domain: str) -> Maker:
    obstypes = list(OBSERVATIONS[domain])

    def make(i: int, at: datetime) -> dict[str, Any]:
        return {"obstype": obstypes[i % len(obstypes)], "slope": round(rng.gauss(1.0, 0.1), 4),
                "intercept": round(rng.gauss(0.0, 2.0), 3), "split": round(rng.uniform(10, 100), 1),
                "version": f"v{i // len(obstypes)}", "ts": iso(at)}
    return make


_MAKERS = {"grid": _grid, "urban": _urban, "taxi": _taxi}


def produce_paced(bootstrap: str, topic: str, make: Maker, rate: float, stop: threading.Event,
                  produced: Counter[str]) -> None:
    """Produce ``make(i, now)`` into ``topic`` at ``rate`` records/s (librdkafka) until ``stop``, counting into
    ``produced``; a benchmark's feed thread."""
    from runtime.broker import rdkafka

    producer = rdkafka.producer(bootstrap, **{"linger.ms": 20})
    failures = rdkafka.Failures()
    began, i = time.monotonic(), 0
    try:
        while not stop.is_set():
            due = began + i / rate
            if due > time.monotonic():
                stop.wait(due - time.monotonic())
                continue
            rdkafka.produce_one(producer, topic, json.dumps(make(i, datetime.now(timezone.utc))).encode(), None, failures)
            i += 1
            produced[topic] += 1
            if i % 500 == 0:
                producer.poll(0)  # serve delivery reports as they come
        rdkafka.flush(producer, 30)
    finally:
        rdkafka.close(producer)
