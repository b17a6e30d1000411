"""Per-principal request budgets: token buckets, one for state-changing requests and one for reads.

Every request that names a principal (every one but ``/healthz``, the inspector's
page and the OpenAPI documents) spends one token of that principal's bucket:
POST, PUT, PATCH and DELETE from the write bucket, the others from the read
bucket, whatever the answer turns out to be. A bucket holds ``burst`` tokens and
refills at ``per_s`` tokens a second; an empty one refuses the request with
:class:`~api.exceptions.RateLimited` (429 ``RATE_LIMITED``, ``Retry-After``: the
whole seconds until a token is back), and a refused request spends nothing.
Admins are not limited unless ``SANA_RATE_LIMIT_ADMINS`` says so: single-user
mode's caller is the admin ``local``, whose benchmarks submit thousands of
dataflows. The buckets live in the process: one per principal of the tokens
file at most, so they take bounded memory.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from api.exceptions import RateLimited
from sana.auth import Principal
from sana.settings import Settings

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class Budget:
    """``burst`` requests at once, then ``per_s`` a second; ``per_s == 0`` means no limit."""

    per_s: float
    burst: int
    what: str
    settings: str

    @property
    def unlimited(self) -> bool:
        return self.per_s <= 0


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class RateLimiter:
    """The buckets of every principal; thread-safe (handlers run in a thread pool)."""

    def __init__(self, writes: Budget, reads: Budget, admins: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.writes = writes
        self.reads = reads
        self.admins = admins
        self._clock = clock
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> "RateLimiter":
        return cls(
            Budget(settings.rate_limit_writes_per_s, settings.rate_limit_write_burst, "state-changing requests",
                   "SANA_RATE_LIMIT_WRITES_PER_S, SANA_RATE_LIMIT_WRITE_BURST"),
            Budget(settings.rate_limit_reads_per_s, settings.rate_limit_read_burst, "reads",
                   "SANA_RATE_LIMIT_READS_PER_S, SANA_RATE_LIMIT_READ_BURST"),
            admins=settings.rate_limit_admins,
        )

    def charge(self, principal: Principal, method: str) -> None:
        """Spend one token of ``principal``'s bucket for a ``method`` request, or raise :class:`RateLimited`.

        >>> now = [0.0]
        >>> limiter = RateLimiter(Budget(0.5, 2, "state-changing requests", "W"), Budget(0, 1, "reads", "R"),
        ...                       clock=lambda: now[0])
        >>> ann = Principal("ann", "user")
        >>> limiter.charge(ann, "POST"), limiter.charge(ann, "POST")
        (None, None)
        >>> limiter.charge(ann, "DELETE")
        Traceback (most recent call last):
        ...
        api.exceptions.RateLimited: 'ann' spent their budget of state-changing requests (2 at once, then 0.5 a second: W); the next one passes in 2 s
        >>> now[0] = 2.0; limiter.charge(ann, "POST"); limiter.charge(ann, "GET")  # refilled; reads unlimited
        """
        if principal.admin and not self.admins:
            return
        budget = self.writes if method.upper() in WRITES else self.reads
        if budget.unlimited:
            return
        key = (principal.name, budget.what)
        with self._lock:
            now = self._clock()
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = _Bucket(float(budget.burst), now)
            bucket.tokens = min(float(budget.burst), bucket.tokens + (now - bucket.stamp) * budget.per_s)
            bucket.stamp = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return
            wait = max(1, math.ceil((1.0 - bucket.tokens) / budget.per_s))
        raise RateLimited(
            f"{principal.name!r} spent their budget of {budget.what} ({budget.burst} at once, then {budget.per_s:g} "
            f"a second: {budget.settings}); the next one passes in {wait} s",
            retry_after_s=wait, culprit={"limit": budget.settings.split(",")[0]})
