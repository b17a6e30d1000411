"""RIoTBench-style sensor streams for ``sana produce`` and ``sana up --demo`` (docs/reuse.md, "Workloads").

Three kinds, after RIoTBench's datasets: ``urban`` (city sensors, SYS),
``taxi`` (NYC taxi trips, TAXI) and ``grid`` (smart-grid meters). Records are
JSON objects with an event time ``ts`` (ISO-8601, UTC). Values are drawn from
a seeded generator, and the urban sensors' readings follow the time of day of
their event time (a daily cycle). Without ``start`` event times are the wall
clock, so the same seed gives other temperatures a minute later; with
``start`` (record i is at start + i/rate) a seed fixes the whole stream.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from runtime.broker import rdkafka
from runtime.exceptions import RuntimeFailure

KINDS = ("urban", "taxi", "grid", "model")
OBSTYPES = ("temp", "humidity", "light", "dust", "airquality")
SCHEMAS = {
    "urban": {"sensor": "string", "temp": "double", "humidity": "double", "light": "double", "dust": "double",
              "airquality": "double", "obstype": "string", "value": "double", "msgid": "bigint", "ts": "timestamp"},
    "taxi": {"medallion": "string", "zone": "string", "pickup_zone": "string", "trip_time_s": "int",
             "distance": "double", "distance_km": "double", "fare": "double", "tip": "double", "ts": "timestamp"},
    "grid": {"meter": "string", "house": "string", "load_kw": "double", "voltage": "double", "ts": "timestamp"},
    "model": {"obstype": "string", "slope": "double", "intercept": "double", "ts": "timestamp"},
}


def kind_of(topic: str) -> str:
    """The stream kind a demo topic gets, by its name (``urban`` when nothing matches).

    >>> kind_of("taxi-trips"), kind_of("urban-models"), kind_of("sensors")
    ('taxi', 'model', 'urban')
    """
    for kind in ("model", "taxi", "grid"):
        if kind in topic:
            return kind
    return "urban"


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@dataclass
class Generator:
    """Records of one kind; ``next(at)`` gives the record with event time ``at``."""

    kind: str
    seed: int = 1
    entities: int = 20

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown stream kind {self.kind!r} (known: {', '.join(KINDS)})")
        self.rng = random.Random(self.seed)
        self.count = 0

    def next(self, at: datetime) -> dict[str, Any]:
        rng, i = self.rng, self.count
        self.count += 1
        entity = rng.randrange(self.entities)
        hour = at.hour + at.minute / 60
        if self.kind == "urban":
            daily = math.sin((hour - 9) / 24 * 2 * math.pi)
            record = {"sensor": f"s{entity:03d}", "temp": round(22 + 10 * daily + rng.gauss(0, 4) + entity % 5, 2),
                      "humidity": round(min(100.0, max(0.0, 55 - 15 * daily + rng.gauss(0, 8))), 2),
                      "light": round(max(0.0, 800 * daily + rng.gauss(0, 50)), 1), "dust": round(abs(rng.gauss(40, 25)), 1),
                      "airquality": round(abs(rng.gauss(60, 20)), 1)}
            obstype = OBSTYPES[i % len(OBSTYPES)]  # SenML style: one observation per message
            record.update({"obstype": obstype, "value": record[obstype], "msgid": i, "ts": iso(at)})
            return record
        if self.kind == "taxi":
            distance = round(rng.lognormvariate(1.0, 0.7), 2)
            fare = round(2.5 + 1.6 * distance + rng.uniform(0, 3), 2)
            zone = f"z{rng.randrange(12):02d}"
            return {"medallion": f"m{entity:04d}", "zone": zone, "pickup_zone": zone,
                    "trip_time_s": int(120 + distance * 150 * rng.uniform(0.7, 1.5)), "distance": distance,
                    "distance_km": distance, "fare": fare, "tip": round(fare * rng.choice((0, 0.1, 0.15, 0.2)), 2),
                    "ts": iso(at)}
        if self.kind == "model":
            return {"obstype": OBSTYPES[i % len(OBSTYPES)], "slope": round(rng.gauss(0.5, 0.1), 4),
                    "intercept": round(rng.gauss(10, 2), 3), "ts": iso(at)}
        return {"meter": f"g{entity:04d}", "house": f"h{entity // 4:03d}",
                "load_kw": round(abs(rng.gauss(1.2 + (i % 7) * 0.1, 0.6)), 3), "voltage": round(rng.gauss(230, 3), 1),
                "ts": iso(at)}


def stream(kind: str, rate: float, seed: int = 1, start: datetime | None = None,
           count: int | None = None, entities: int = 20) -> Iterator[tuple[float, dict[str, Any]]]:
    """``(due monotonic time, record)`` pairs at ``rate`` records per second, forever or ``count`` times."""
    generator = Generator(kind, seed, entities)
    began = time.monotonic()
    i = 0
    while count is None or i < count:
        due = began + i / rate
        at = start + timedelta(seconds=i / rate) if start else datetime.now(timezone.utc)
        yield due, generator.next(at)
        i += 1


def produce(bootstrap: str, topic: str, kind: str, rate: float, seed: int = 1, *, count: int | None = None,
            duration_s: float | None = None, start: datetime | None = None, entities: int = 20,
            stop: Callable[[], bool] = lambda: False, linger_ms: int = 20) -> int:
    """Produce a stream into ``topic`` at ``rate`` records/s until ``count``, ``duration_s`` or ``stop()``.

    ``linger_ms``: how long a record may wait for others to share its broker batch (at a low rate every record is
    a batch of its own)."""
    producer = rdkafka.producer(bootstrap, delivery_timeout_ms=30_000, **{"linger.ms": linger_ms})
    failures = rdkafka.Failures()
    sent = 0
    deadline = time.monotonic() + duration_s if duration_s else None
    try:
        for due, record in stream(kind, rate, seed, start, count, entities):
            now = time.monotonic()
            if stop() or (deadline is not None and now >= deadline):
                break
            if due > now:
                time.sleep(due - now)
            rdkafka.produce_one(producer, topic, json.dumps(record).encode(), None, failures)
            sent += 1
            if sent % 1000 == 0:
                producer.poll(0)  # serve failure reports as they come
        rdkafka.flush(producer, 30)
    finally:
        rdkafka.close(producer)
    if failures.records:
        raise RuntimeFailure(f"{len(failures.records)} of {sent} record(s) were not written to {topic}: "
                             f"{failures.errors[0].str()}")
    return sent
