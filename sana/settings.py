"""One settings object, read from the environment (the README's "Configuration"; docs/architecture.md).

Built by :func:`get_settings` (never at import time) so tests can override the
environment; the Helm chart's values map one-to-one onto these variables.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sana import failpoints

EMBEDDED_KAFKA_HOST = "127.0.0.1"


class Settings(BaseSettings):
    """Every knob Sana reads. Environment variables carry the ``SANA_`` prefix."""

    model_config = SettingsConfigDict(env_prefix="SANA_", extra="ignore")

    redis_url: str = Field(
        "redis://127.0.0.1:6379/0", description="Redis holding the manager's durable state."
    )
    state_prefix: str = Field(
        "sana",
        description="Every Redis key the manager writes starts with this prefix.",
    )
    kafka_bootstrap: str | None = Field(
        None,
        description="Kafka bootstrap servers; unset means the embedded broker on 127.0.0.1:9092.",
    )
    embedded_kafka_port: int = Field(
        9092, ge=1, le=65535, description="Port of the embedded broker `sana up` starts."
    )
    spark_master: str = Field("local[*]", description="Spark master URL.")
    trigger_s: float = Field(
        1.0, ge=0.1, le=600.0,
        description="Micro-batch trigger interval of every fragment query, seconds (each idle query costs CPU per trigger).",
    )
    keep_idle_queries_s: float = Field(
        30.0, ge=0.0, le=3600.0,
        description="How long a Spark query whose last task left keeps running, for a later change that needs a query "
        "reading the same topics at its site (no query start then); 0 stops it at once.",
    )
    ansi_sql: bool = Field(
        False,
        description="Evaluate expressions in Spark's ANSI mode: a bad cast, a division by zero, an index out of range "
        "or an overflow fails the task, whose dataflow is then quarantined with the error shown; off (the default), "
        "they give null as in non-ANSI Spark.",
    )
    dry_run: bool = Field(
        False, description="Plan and record deployments without starting Spark or Kafka."
    )
    sharing: bool = Field(
        True,
        description="Reuse running tasks across dataflows; false runs every dataflow alone (the baseline of docs/reuse.md).",
    )
    containment: bool = Field(
        True,
        description="Let a filter or select read a running one that contains it (a wider filter, a select it computes "
        "from); false shares only equivalent tasks.",
    )
    gc_freeze: bool = Field(
        True,
        description="Freeze what survives each full garbage collection of the server, so that a full collection "
        "examines only what changed since the last one (api/collector.py); false leaves CPython's collector as it is.",
    )
    defrag_after_removals: int = Field(
        0, ge=0, le=1_000_000,
        description="Run `sana defrag` in the background after every N removals (0: only when an operator runs it).",
    )
    api_host: str = Field("127.0.0.1", description="Address the API listens on.")
    api_port: int = Field(8000, ge=1, le=65535, description="Port the API listens on.")
    max_tasks_per_dataflow: int = Field(200, ge=1, le=100_000, description="Most tasks one dataflow may have (429 over it).")
    max_dataflows_per_owner: int = Field(1000, ge=1, le=1_000_000, description="Most dataflows one owner may run (429 over it).")
    max_running_tasks: int = Field(20_000, ge=1, le=10_000_000, description="Most running tasks the whole service takes (503 over it).")
    max_queries: int = Field(
        2_000, ge=1, le=1_000_000,
        description="Most Spark queries the whole service may need (503 over it), counted as running fragments: "
        "each needs one query at most (hosting runs several in one).")
    # What one task's config may multiply (records, state, Spark tasks); over it, the submit gets 422
    # OPERATOR_CONFIG_INVALID naming the task, the field and the variable (runtime/operators/limits.py).
    # 315,360,000 s is the 3650 days every duration is held to anyway (runtime/operators/fields.py).
    max_window_s: int = Field(
        604_800, ge=1, le=315_360_000,
        description="Longest window of a window_aggregate or a join, seconds (default 7 days): state is kept that long.")
    max_watermark_s: int = Field(
        86_400, ge=1, le=315_360_000,
        description="Longest watermark a window_aggregate or a join may give, seconds (default 1 day): "
        "windows stay open and state is kept that much longer.")
    max_windows_per_record: int = Field(
        100, ge=1, le=100_000,
        description="Most windows a sliding window_aggregate may put each record in, ceil(window / slide): "
        "each record is repeated that many times.")
    max_keyed_workers: int = Field(
        16, ge=1, le=64,
        description="Most logical workers a keyed task's `workers` may ask; each is a Spark task in every micro-batch.")
    max_reshape_helpers: int = Field(
        7, ge=1, le=63,
        description="Most helpers a keyed task's `reshape.max_helpers` may ask; a join copies the other side's "
        "records of a split worker to each.")
    min_reshape_eta: float = Field(
        1.1, gt=1.0, le=64.0,
        description="Lowest skew threshold a keyed task's `reshape.eta` may ask (nearer 1, Reshape splits and moves "
        "state on ordinary imbalance).")
    min_reshape_tau: float = Field(
        0.05, gt=0.0, le=64.0,
        description="Lowest load gap a keyed task's `reshape.tau_min` or `reshape.tau_max` may ask (smaller, Reshape "
        "starts a new iteration on noise).")
    max_columns: int = Field(
        256, ge=1, le=10_000,
        description="Most columns the output of one task may have (a source's schema, a select, a join's output...).")
    max_union_inputs: int = Field(
        16, ge=2, le=10_000, description="Most streams one union may take.")
    tokens_file: Path | None = Field(
        None, description="JSON file of principals and their tokens' SHA-256 (sana/auth.py, `sana token new`); "
        "without it the service runs in single-user mode and `sana up` listens on loopback only.")
    # Each principal's request budget (api/ratelimit.py): token buckets refilling at *_PER_S, holding *_BURST;
    # over it, 429 RATE_LIMITED with Retry-After. 0 per second: no limit of that kind.
    rate_limit_writes_per_s: float = Field(
        5.0, ge=0.0, le=1_000_000.0,
        description="State-changing requests (POST, PUT, PATCH, DELETE) a principal may make per second, sustained (0: no limit).")
    rate_limit_write_burst: int = Field(
        30, ge=1, le=1_000_000, description="State-changing requests a principal may make at once before the rate applies.")
    rate_limit_reads_per_s: float = Field(
        20.0, ge=0.0, le=1_000_000.0, description="Reads (GET and the rest) a principal may make per second, sustained (0: no limit).")
    rate_limit_read_burst: int = Field(
        100, ge=1, le=1_000_000, description="Reads a principal may make at once before the rate applies.")
    rate_limit_admins: bool = Field(
        False, description="Limit admins too; by default they are not (single-user mode's caller is the admin `local`).")
    wan_config: Path | None = Field(
        None,
        description="WAN configuration file (docs/wan.md), applied at start when it differs from the stored one.",
    )
    run_dir: Path = Field(
        Path(".sana/run"), description="Where `sana up` keeps the logs of its children, a folder per run."
    )
    data_dir: Path = Field(
        Path(".sana/data"), description="Where `sana up` keeps the embedded broker's records and the embedded Valkey's "
        "state across runs (`sana reset` deletes it)."
    )
    ephemeral: bool = Field(
        False, description="`sana up` keeps nothing across runs: the embedded broker in memory, an embedded Valkey "
        "without a file, the checkpoints in the run's folder (`sana up --ephemeral`)."
    )
    checkpoint_dir: Path = Field(
        Path(".sana/data/checkpoints"), description="Where Spark queries keep their checkpoints (the broker offsets they "
        "have read: they belong with the broker's data)."
    )
    broker_object_store: str | None = Field(
        None, description="Set by `sana up` to the S3 endpoint of the embedded object store when the embedded broker "
        "keeps its records there: the service then deletes the oldest record batches of long partitions, none that a "
        "query may still read (api/retention.py, docs/reliability.md)."
    )
    demo_linger_ms: int | None = Field(
        None, ge=0, description="How long `sana up --demo`'s sources wait to fill a record batch (default: 1,000 ms on "
        "the durable broker, 20 in memory)."
    )
    broker_retention_batches: int = Field(
        1000, ge=0, description="Record batches each partition of the durable embedded broker keeps at least before "
        "the oldest are deleted (0: never delete; reads stall past a few thousand, docs/reliability.md)."
    )

    failpoints: str = Field(
        "", description="Testing only: fail points where the process kills itself (sana/failpoints.py), e.g. "
        "`manager.merge.deployed=kill`; empty in every deployment.")

    keyed_workers: int = Field(
        8, ge=1, le=64, description="Logical workers of every keyed operator (window_aggregate, join) unless its config sets `workers`."
    )
    reshape_enabled: bool = Field(True, description="Reshape: detect and mitigate skew in every keyed shuffle (docs/skew.md).")
    reshape_split: Literal["records", "keys"] = Field(
        "records", description="How Reshape shares a skewed worker's load: `records` (a key's records spread) or `keys` (whole buckets move)."
    )
    reshape_eta: float = Field(
        1.5, gt=1.0, le=64.0, description="Reshape's skew threshold: a worker is skewed at this multiple of its fair share of a batch."
    )
    reshape_tau_min: float = Field(0.1, gt=0.0, le=64.0, description="Lowest load gap (in fair shares) Reshape's adaptive tau may take.")
    reshape_tau_max: float = Field(0.5, gt=0.0, le=64.0, description="Highest load gap (in fair shares) Reshape's adaptive tau may take.")
    reshape_max_helpers: int = Field(3, ge=1, le=63, description="Most helpers Reshape gives one skewed worker.")
    reshape_min_excess_rows: int = Field(
        2_000, ge=0, le=100_000_000,
        description="Reshape stays quiet while a skewed worker's rows above its fair share of a batch are fewer "
        "(a split of a few hundred rows costs more than it saves); 0: split at any load.")

    @model_validator(mode="after")
    def _tau_range(self) -> "Settings":
        if self.reshape_tau_min > self.reshape_tau_max:
            raise ValueError(
                f"SANA_RESHAPE_TAU_MIN={self.reshape_tau_min} is above SANA_RESHAPE_TAU_MAX={self.reshape_tau_max}"
            )
        return self

    @field_validator("failpoints")
    @classmethod
    def _known_failpoints(cls, value: str) -> str:
        failpoints.parse(value)  # a typo must not silently test nothing
        return value

    @field_validator("state_prefix")
    @classmethod
    def _prefix_is_a_key_part(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", value):
            raise ValueError(
                f"SANA_STATE_PREFIX={value!r}: use 1-64 of letters, digits and _ . : -"
            )
        return value

    @property
    def effective_kafka_bootstrap(self) -> str:
        """The bootstrap address in use: the configured one or the embedded broker's."""
        return self.kafka_bootstrap or f"{EMBEDDED_KAFKA_HOST}:{self.embedded_kafka_port}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read from the environment on first use.

    Tests that change the environment call ``get_settings.cache_clear()``.
    """
    return Settings()
