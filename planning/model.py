"""Plain data the optimizer and the scheduler exchange: a query to place, the running set, the plan.

A *query* is the new dataflow, de-duplicated, as :class:`QueryTask` values in
parents-first order. The *running set* is read through :class:`RunningView`
(the manager's state and the simulator's deployment both implement it). The
answer is a :class:`QueryPlan`: one :class:`Decision` per query task, the WAN
crossings the plan adds and the refused sharing opportunities with their
numbers. Between the two stages, Algorithm 1's answer for a vertex is a
:class:`VertexAdmission` (the scheduler places the vertex from it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from wan.flow_index import FlowIndex


#: A producer of a stream while a query is planned: ``(True, running task id)``, or ``(False, query task id)``
#: for a task the plan creates.
Ref = tuple[bool, str]


@dataclass(frozen=True)
class QueryTask:
    """A task of the query being planned.

    ``inputs`` holds ``(port, query task id)`` pairs; ``rate_mbps`` is the
    data rate of its output (measured or estimated; None until the optimizer
    estimates it, :func:`optimizer.rates.with_rates`); ``site`` pins it (a source's origin,
    a sink's configured site, a declared placement wish), None leaves it to
    the scheduler.
    """

    id: str
    signature: str
    type: str
    inputs: tuple[tuple[str, str], ...] = ()
    rate_mbps: float | None = 0.0
    site: str | None = None


@dataclass(frozen=True)
class RunningTask:
    """A running task as the optimizer sees it."""

    id: str
    signature: str
    type: str
    site: str
    inputs: tuple[tuple[str, str], ...]
    rate_mbps: float


class RunningView(Protocol):
    """Read access to the running set.

    ``instances(sig)`` lists the running tasks with that signature (usually
    one; several when a share was refused for bandwidth); ``arrivals(id)``
    maps each *other* site the task's output already crosses to onto the ids
    of its consumers there (the router's view); ``task(id)`` reads one task;
    ``running_tasks()`` lists every running task that has a site;
    ``flow_index()`` gives their flow model kept up to date by the view's owner
    (:class:`wan.flow_index.FlowIndex`), or None: then whoever weighs plans
    builds it from ``running_tasks()``.
    """

    def instances(self, signature: str) -> Iterable[RunningTask]: ...

    def task(self, task_id: str) -> RunningTask: ...

    def arrivals(self, task_id: str) -> Mapping[str, Iterable[str]]: ...

    def running_tasks(self) -> Iterable[RunningTask]: ...

    def flow_index(self) -> FlowIndex | None: ...


@dataclass(frozen=True)
class PlanningOptions:
    """What a planner may do: the switches that tell the policies apart.

    - ``share_sources``: read a raw stream through the running source task
      that already reads it (else every query has its own reader);
    - ``share_inop`` / ``share_in``: exploit IN-OP / IN opportunities;
      ``share_in`` also puts a router at every site a remote stream reaches,
      so a stream crosses to a site once whatever its consumers there;
    - ``bandwidth_checks``: Algorithm 1's admission tests;
    - ``wan_placement``: Algorithm 2's WAN-aware rule for tasks with remote
      inputs (else the WAN-unaware default: the first input's site);
    - ``weigh_refusals``: keep Algorithm 1's plan only when the flow model
      says taking every share would not deliver more
      (:func:`optimizer.planner.admit_shares`); off, Algorithm 1 as printed.
      The private plan (:meth:`private`) is weighed too;
    - ``buffered_hops``: weigh plans with buffered hops (a congested crossing
      slows only what reads it, as Kafka topics between Sana's queries do;
      :func:`wan.flow.decoupled_rates`) instead of the paper's backpressure.
      The service weighs this way unless its WAN configuration says
      ``"hops": "backpressure"`` (:func:`service_options`), on the running
      set's flow index (:mod:`wan.buffered`); the simulator's ``sana`` is the
      paper's, with backpressure.
    """

    share_sources: bool = True
    share_inop: bool = True
    share_in: bool = True
    bandwidth_checks: bool = True
    wan_placement: bool = True
    weigh_refusals: bool = True
    buffered_hops: bool = False

    @property
    def router(self) -> bool:
        return self.share_in

    @property
    def private_gain(self) -> float:
        """What the private plan must out-deliver the best sharing plan by: :data:`PRIVATE_GAIN`, or
        :data:`PRIVATE_GAIN_BUFFERED` when plans are weighed with buffered hops.

        >>> SANA.private_gain, service_options("sana", "buffered").private_gain
        (1.05, 1.02)
        """
        return PRIVATE_GAIN_BUFFERED if self.buffered_hops else PRIVATE_GAIN

    def private(self) -> PlanningOptions:
        """The switches of a plan that shares nothing running: its own source readers, its own tasks, no
        bandwidth checks (nothing to admit); routers and placement as before. NET is ``PlanningOptions(
        share_in=False).private()`` (``wan_sim.policies``); the weighing plans a query this way too.

        >>> SANA.private().share_sources, SANA.private().share_inop, SANA.private().router
        (False, False, True)
        """
        return replace(self, share_sources=False, share_inop=False, bandwidth_checks=False)


SANA = PlanningOptions()
#: The policies a WAN configuration may name (``policy``): Sana, and two baselines to compare it with on a real
#: runtime (``wan_sim.emulation``). NET shares nothing and places WAN-aware; Max-Share takes every share unchecked.
#: The configuration's ``hops`` sets ``buffered_hops`` (:func:`service_options`).
NET = PlanningOptions(share_sources=False, share_inop=False, share_in=False, bandwidth_checks=False)
MAX_SHARE = PlanningOptions(bandwidth_checks=False)
SERVICE_POLICIES: dict[str, PlanningOptions] = {"sana": SANA, "net": NET, "max-share": MAX_SHARE}


def service_options(policy: str, hops: str) -> PlanningOptions:
    """The options the service plans with for a WAN configuration's ``policy`` and ``hops``.

    >>> service_options("sana", "buffered").buffered_hops, service_options("sana", "backpressure").buffered_hops
    (True, False)
    """
    return replace(SERVICE_POLICIES[policy], buffered_hops=hops == "buffered")


@dataclass(frozen=True)
class Refusal:
    """A sharing opportunity Algorithm 1 turned down, with the link and the numbers.

    ``kind`` is ``IN-OP`` or ``IN``; ``candidate`` the running task (or
    query task) that could have been shared or co-located with; ``direction``
    says whether the candidate site's egress or its ingress lacks bandwidth.
    """

    kind: str
    candidate: str
    site: str
    link: tuple[str, str]
    needed_mbps: float
    available_mbps: float
    direction: str

    @property
    def reason(self) -> str:
        what = "egress" if self.direction == "egress" else "ingress"
        share = "sharing" if self.kind == "IN-OP" else "co-locating with"
        return (
            f"{share} {self.candidate} at {self.site} needs {self.needed_mbps:.3f} Mbps of {what} on "
            f"{self.link[0]} -> {self.link[1]}, which has {self.available_mbps:.3f} Mbps spare"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "candidate": self.candidate,
            "site": self.site,
            "link": {"from": self.link[0], "to": self.link[1]},
            "needed_mbps": round(self.needed_mbps, 6),
            "available_mbps": round(self.available_mbps, 6) if self.available_mbps > -1e300 else None,
            "direction": self.direction,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Check:
    """A bandwidth test Algorithm 1 passed (kept so tests and logs can audit admissions)."""

    kind: str
    candidate: str
    link: tuple[str, str]
    needed_mbps: float
    available_mbps: float


@dataclass(frozen=True)
class Decision:
    """What happens to one query task.

    ``action`` is ``reuse`` (the running task ``running`` serves it: IN-OP or
    a shared source) or ``create`` (a new task at ``site``). ``rule`` names
    the branch of Algorithm 2 that chose the site: ``IN-OP``, ``source``,
    ``pinned``, ``IN``, ``locality``, ``wan`` or ``default`` (WAN-unaware).
    """

    task: str
    action: str
    site: str
    rule: str
    running: str | None = None
    partner: str | None = None
    shared_inputs: tuple[str, ...] = ()
    refused: tuple[Refusal, ...] = ()
    checks: tuple[Check, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {"action": self.action, "site": self.site, "rule": self.rule}
        if self.running is not None:
            result["running"] = self.running
        if self.partner is not None:
            result["partner"] = self.partner
        if self.refused:
            result["refused"] = [refusal.to_dict() for refusal in self.refused]
        return result


@dataclass(frozen=True)
class Crossing:
    """A stream the plan sends over the WAN.

    ``producer`` is a running task id when ``running`` is True, else a query
    task id (a task the plan creates). ``consumer`` is set when there is no
    router (each edge crosses on its own).
    """

    producer: str
    running: bool
    src_site: str
    dst_site: str
    rate_mbps: float
    consumer: str | None = None


#: What :func:`optimizer.planner.standing` compares, in order (its first two are negated there: lower is better).
WEIGHING_CRITERIA = ("delivered_mbps", "delivered_mbps_at_headroom", "added_mbps", "latency_ms", "peak_utilization",
                     "mbps_beyond_spare")


PRIVATE_GAIN = 1.05
"""The factor by which the private plan (:meth:`PlanningOptions.private`) must out-deliver the best sharing plan
today to be kept. A private plan runs again what already runs (a source reader, a chain of tasks): that costs
cores and WAN whatever it delivers, so it is worth it only for throughput the sinks would otherwise lose, and
not for a rounding's worth of it, nor for latency or headroom alone."""

PRIVATE_GAIN_BUFFERED = 1.02
"""The same factor when plans are weighed with buffered hops (the service's default). Chosen on the tuned
families of ``benchmarks.wan_families``, scored and weighed with buffered hops (1.00 to 1.10 tried; docs/wan.md,
"Every case behind, and why"): with buffered hops a congested crossing slows only its readers, so a private
reader that delivers more takes less from the others than backpressure says, and a smaller margin pays."""


@dataclass(frozen=True)
class Weighing:
    """How a query's plans stood (:func:`optimizer.planner.standing`, lower is better): Algorithm 1's, the one
    taking every share and, when weighed, the private one (sharing nothing running). ``kept`` names the plan
    placed; ``deciding`` the first criterion of :data:`WEIGHING_CRITERIA` on which the kept plan differs from
    the better sharing plan it was kept over (None: they tie, and Algorithm 1's is kept).

    >>> Weighing("every share", (-10.0, -12.0, 8.0, 30.0, 1.0, 0.0), (-12.0, -12.0, 8.0, 30.0, 1.0, 0.0)).to_dict()["deciding"]
    'delivered_mbps'
    >>> Weighing("private", (-10.0, -12.0, 8.0, 30.0, 1.0, 0.0), (-10.0, -12.0, 8.0, 30.0, 1.0, 0.0),
    ...          (-20.0, -20.0, 16.0, 30.0, 1.0, 0.0)).to_dict()["private"]["delivered_mbps"]
    20.0
    >>> Weighing("algorithm 1", (-10.0, -12.0, 8.0, 30.0, 1.0, 0.0), (-10.0, -12.0, 9.0, 30.0, 1.0, 0.0),
    ...          (-10.2, -20.0, 16.0, 30.0, 1.0, 0.0)).deciding   # not the private plan's 2 % more: it is not worth it
    'added_mbps'
    >>> Weighing("every share", (-10.0, -12.0, 8.0, 45.0, 1.0, 0.0), (-10.0, -12.0, 8.0, 30.0, 1.2, 0.0)).deciding
    'latency_ms'
    """

    kept: str
    algorithm_1: tuple[float, ...]
    every_share: tuple[float, ...]
    private: tuple[float, ...] | None = None

    @property
    def standings(self) -> dict[str, tuple[float, ...]]:
        result = {"algorithm 1": self.algorithm_1, "every share": self.every_share}
        if self.private is not None:
            result["private"] = self.private
        return result

    @property
    def deciding(self) -> str | None:
        """The first criterion on which the kept plan differs from the better sharing plan it was kept over (the
        private plan, when not kept, fell short of :data:`PRIVATE_GAIN` and decides nothing)."""
        sharing = {"algorithm 1": self.algorithm_1, "every share": self.every_share}
        kept = self.standings[self.kept]
        best_other = min(standing for name, standing in sharing.items() if name != self.kept)
        return next((name for name, a, b in zip(WEIGHING_CRITERIA, kept, best_other) if a != b), None)

    def to_dict(self) -> dict[str, Any]:
        def named(standing: tuple[float, ...]) -> dict[str, float]:
            return {name: (-value or 0.0) if name.startswith("delivered") else value
                    for name, value in zip(WEIGHING_CRITERIA, standing)}

        result = {"kept": self.kept, "deciding": self.deciding, "algorithm_1": named(self.algorithm_1),
                  "every_share": named(self.every_share)}
        if self.private is not None:
            result["private"] = named(self.private)
        return result


@dataclass(frozen=True)
class QueryPlan:
    """A placed query: decisions in parents-first order, new crossings, added link loads.

    ``overruled`` holds (query task id, refusal) for the refusals of Algorithm 1
    the planner set aside because taking every share would deliver more
    (see :func:`optimizer.planner.admit_shares`); ``weighing`` how the two plans
    stood, when they were weighed.
    """

    decisions: dict[str, Decision]
    crossings: tuple[Crossing, ...] = ()
    link_delta: dict[tuple[str, str], float] = field(default_factory=dict)
    compared: int = 0
    skipped: int = 0
    overruled: tuple[tuple[str, Refusal], ...] = ()
    weighing: Weighing | None = None

    @property
    def refusals(self) -> list[tuple[str, Refusal]]:
        """(query task id, refusal) for every refused opportunity, in task order."""
        return [(task_id, refusal) for task_id, decision in self.decisions.items() for refusal in decision.refused]


@dataclass(frozen=True)
class InCandidate:
    """Co-location at ``site`` with ``partner``, a consumer there of the ``shared`` inputs.

    ``missing`` are the inputs that would have to cross to ``site``:
    ``(ref, rate in Mbps, producer site)``.
    """

    site: str
    partner: str
    shared: tuple[Ref, ...]
    shared_rate: float
    missing: tuple[tuple[Ref, float, str], ...]


@dataclass(frozen=True)
class Admitted:
    """The opportunities Algorithm 1 lets the scheduler choose from, and the ones it refused."""

    inop: tuple[tuple[RunningTask, tuple[Check, ...]], ...]
    in_sites: tuple[tuple[InCandidate, tuple[Check, ...]], ...]
    refused: tuple[Refusal, ...]


@dataclass(frozen=True)
class VertexAdmission:
    """Algorithm 1's answer for one vertex: what it admitted, and the IN-OP candidates it did not.

    ``compared`` is False when early termination skipped the IN-OP comparison
    (a parent was not shared, so no running task reads this vertex's inputs).
    """

    admitted: Admitted
    refused_inop: tuple[RunningTask, ...]
    compared: bool
