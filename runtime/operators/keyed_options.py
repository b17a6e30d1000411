"""Knobs every keyed operator (``window_aggregate``, ``join``) takes: its logical workers and Reshape.

They tune how a task runs, not what it computes: two tasks that differ only in
them have the same signature and are shared (the running task keeps the knobs
of the dataflow that started it). Every field left out falls back to the
service's settings (``SANA_KEYED_WORKERS``, ``SANA_RESHAPE_*``); what a task may
ask is bounded at submit (``SANA_MAX_KEYED_WORKERS``, ``SANA_MAX_RESHAPE_HELPERS``,
``SANA_MIN_RESHAPE_ETA``, ``SANA_MIN_RESHAPE_TAU``; runtime/operators/limits.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from runtime.operators.base import OperatorConfig
from runtime.operators.limits import OperatorLimits, check_count, check_floor

MAX_WORKERS = 64  # one bucket per worker at least (runtime.spark.shuffle.BUCKETS)
RUNTIME_KEYS = ("workers", "reshape")  # config keys left out of a task's signature


class ReshapeOptions(OperatorConfig):
    """Reshape's knobs (docs/skew.md); ``None`` means "the service's setting".

    Loads are in units of a worker's fair share of the operator's input per
    micro-batch (1.0: exactly its share).
    """

    enabled: bool | None = None
    split: Literal["records", "keys"] | None = Field(
        None, description="records (default): a hot key's records spread over the skewed worker and its helpers; "
                          "keys: whole buckets move (use it when a consumer needs each key's records in order)")
    eta: float | None = Field(None, gt=1.0, le=64.0, description="a worker is skewed at a load of at least eta")
    tau_min: float | None = Field(None, gt=0.0, le=64.0, description="lowest load gap tau may adapt to")
    tau_max: float | None = Field(None, gt=0.0, le=64.0, description="highest load gap tau may adapt to")
    max_helpers: int | None = Field(None, ge=1, le=MAX_WORKERS - 1, description="helpers one skewed worker may get")
    min_excess_rows: int | None = Field(
        None, ge=0, le=100_000_000,
        description="no split starts while the skewed worker's rows above its fair share per batch are fewer")

    @model_validator(mode="after")
    def _tau_range(self) -> "ReshapeOptions":
        if self.tau_min is not None and self.tau_max is not None and self.tau_min > self.tau_max:
            raise ValueError(f"tau_min {self.tau_min} is above tau_max {self.tau_max}")
        return self


class KeyedOptions(OperatorConfig):
    """Mixed into the config of every keyed operator."""

    workers: int | None = Field(None, ge=1, le=MAX_WORKERS, description="logical workers of the keyed shuffle")
    reshape: ReshapeOptions | None = None

    def check_limits(self, limits: OperatorLimits) -> None:
        """Every worker is a Spark task per batch; every helper of a join gets a copy of the other side's records;
        a low eta or tau makes Reshape split and move state on ordinary imbalance or noise."""
        if self.workers is not None:
            check_count("workers", "workers", self.workers, limits, "max_keyed_workers")
        options = self.reshape
        if options is None:
            return
        if options.max_helpers is not None:
            check_count("reshape.max_helpers", "helpers", options.max_helpers, limits, "max_reshape_helpers")
        if options.eta is not None:
            check_floor("reshape.eta", "eta", options.eta, limits, "min_reshape_eta")
        for name in ("tau_min", "tau_max"):
            value = getattr(options, name)
            if value is not None:
                check_floor(f"reshape.{name}", name, value, limits, "min_reshape_tau")


def tidy_runtime_keys(config: dict) -> dict:
    """A keyed task's canonical config: knobs left to the settings are left out, not stored as nulls.

    >>> tidy_runtime_keys({"on": ["k"], "workers": None, "reshape": {"eta": 2.0, "split": None}})
    {'on': ['k'], 'reshape': {'eta': 2.0}}
    """
    tidy = {key: value for key, value in config.items() if key not in RUNTIME_KEYS or value is not None}
    if isinstance(tidy.get("reshape"), dict):
        tidy["reshape"] = {key: value for key, value in tidy["reshape"].items() if value is not None}
    return tidy


def without_runtime_keys(config: dict) -> dict:
    """``config`` without the keys that only tune how a task runs (what a signature hashes)."""
    return {key: value for key, value in config.items() if key not in RUNTIME_KEYS}
