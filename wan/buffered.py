"""The running set's flow with buffered hops, kept by the flow index as sums over the paths data takes.

Sana's queries are linked by Kafka topics: a congested crossing slows only
what reads it (:func:`wan.flow.decoupled_rates`, which the emulated WAN agrees
with). With routers, every stream crossing a link is delivered at the link's
fraction ``min(1, capacity / load)``. A task's *reach* of a source (the
share of that source's data at full rate that arrives in its output) is then
a sum over the paths the source's data took to it: a constant weight per path
(what each input carries of the source, fixed while the task runs) times the
product of the fractions of the path's links. So the model is small whatever
the number of tasks: a *group* is a source and a path, and

- a link's load is, over the groups its crossing producers carry, a constant
  weight (their source vectors times their path weights) times the group's
  product of fractions;
- what the sinks receive is the same kind of sum over the groups that reach
  them, with each source's rate as the weight.

A :class:`PathModel` holds those weights and is changed with each task added
or dropped (:func:`adding`, :func:`dropping` describe a change, :meth:`PathModel.apply`
writes it). A :class:`BufferedState` holds the link fractions and the sinks'
total for one scale of the source rates, and :func:`settle` moves them for a
change: a link whose weights changed is solved again, and with its fraction
every link whose groups cross it, until nothing moves by more than
``SETTLED``. A change reaches links, never tasks one by one: ten thousand
dataflows behind one congested link are one group, not ten thousand
recomputations.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from wan.flow import UNDAMPED_ROUNDS, vector_from_inputs

Link = tuple[str, str]
Path = tuple[Link, ...]
Group = tuple[str, Path]  # a source and the links its data crossed, in order
EPSILON = 1e-12
#: A link's fraction that would move by no more than this has settled (decoupled_rates stops at the same).
SETTLED = 1e-9
#: A link's fraction moves at most this many times per change (as decoupled_rates' rounds).
ROUNDS = 200
#: The sinks' total is kept by adding each change's difference; every this many changes it is summed again.
RECOUNT_EVERY = 1000


class Structure(Protocol):
    """What :mod:`wan.flow_index` keeps of the running set (read only here)."""

    sites: dict[str, str]
    inputs: dict[str, tuple[str, ...]]
    rates: dict[str, float]
    vectors: dict[str, dict[str, float]]
    readers: dict[str, int]
    arrivals: dict[tuple[str, str], int]
    link_producers: dict[Link, dict[str, None]]


@dataclass(frozen=True)
class NewTask:
    """A task a plan would start: its id (not a running one), site, input ids (running or new) and rate."""

    id: str
    site: str
    inputs: tuple[str, ...]
    rate_mbps: float


class Change:
    """Weights added to or taken from links' loads and the sinks' sum, each with the count of terms it adds."""

    def __init__(self) -> None:
        self.links: dict[Link, dict[Group, list]] = {}   # link -> group -> [weight, terms]
        self.sinks: dict[Group, list] = {}

    def cross(self, link: Link, vector: Mapping[str, float], mix: Mapping[Group, float], sign: int) -> None:
        """A producer (its source vector and path mix) starts (+1) or stops (-1) crossing ``link``."""
        _add(self.links.setdefault(link, {}), ((group, vector.get(group[0], 0.0) * weight) for group, weight in mix.items()), sign)

    def sink(self, rate: Callable[[str], float], vector: Mapping[str, float], mix: Mapping[Group, float], sign: int) -> None:
        """A task becomes (+1) or stops being (-1) a sink: each source's rate times the share of it that arrives."""
        _add(self.sinks, ((group, rate(group[0]) * weight) for group, weight in mix.items()
                          if vector.get(group[0], 0.0) > EPSILON), sign)


def _add(target: dict[Group, list], terms: Iterable[tuple[Group, float]], sign: int) -> None:
    for group, weight in terms:
        entry = target.get(group)
        if entry is None:
            target[group] = [sign * weight, sign]
        else:
            entry[0] += sign * weight
            entry[1] += sign


class PathModel:
    """Each task's path mix and, summed over tasks, each link's load weights and the sinks' weights."""

    def __init__(self) -> None:
        self.mix: dict[str, dict[Group, float]] = {}
        self.links: dict[Link, dict[Group, list]] = {}       # link -> group -> [weight, terms]
        self.sinks: dict[Group, list] = {}
        self.readers: dict[Link, dict[Link, int]] = {}       # link -> links with groups crossing it -> how many
        self.sink_groups: dict[Link, dict[Group, None]] = {}  # link -> the sinks' groups crossing it

    @classmethod
    def of(cls, index: Structure) -> "PathModel":
        """The paths of ``index``'s running set, gathered at once: each task's mix (its ``sites`` are in the order
        tasks were added, parents first), then each crossing producer's weights and each sink's."""
        model, change = cls(), Change()
        for task_id, site in index.sites.items():
            model.mix[task_id] = mix_from_inputs(task_id, site, index.inputs[task_id], index.sites.__getitem__,
                                                 index.vectors.__getitem__, model.mix.__getitem__)
        for link, producers in index.link_producers.items():
            for producer in producers:
                change.cross(link, index.vectors[producer], model.mix[producer], +1)
        for task_id, inputs in index.inputs.items():
            if inputs and not index.readers[task_id]:
                change.sink(index.rates.__getitem__, index.vectors[task_id], model.mix[task_id], +1)
        model.apply(change)
        return model

    def apply(self, change: Change) -> None:
        """Write ``change`` in; a group whose terms all left is forgotten (no rounding residue stays)."""
        for link, groups in change.links.items():
            target = self.links.setdefault(link, {})
            for group, (weight, terms) in groups.items():
                moved = _merge(target, group, weight, terms)
                for crossed in dict.fromkeys(group[1]) if moved else ():
                    readers = self.readers.setdefault(crossed, {})
                    readers[link] = readers.get(link, 0) + moved  # one per group, however often its path crosses
                    if not readers[link]:
                        del readers[link]
                        if not readers:
                            del self.readers[crossed]
            if not target:
                del self.links[link]
        for group, (weight, terms) in change.sinks.items():
            moved = _merge(self.sinks, group, weight, terms)
            for crossed in dict.fromkeys(group[1]) if moved else ():
                groups = self.sink_groups.setdefault(crossed, {})
                if moved > 0:
                    groups[group] = None
                else:
                    del groups[group]
                    if not groups:
                        del self.sink_groups[crossed]


def _merge(target: dict[Group, list], group: Group, weight: float, terms: int) -> int:
    """Add a change's entry: 1 if the group arrived, -1 if its last term left (it is forgotten), else 0."""
    entry = target.get(group)
    if entry is None:
        if not terms:
            return 0
        target[group] = [weight, terms]
        return 1
    entry[0] += weight
    entry[1] += terms
    if entry[1] == 0:
        del target[group]
        return -1
    return 0


def mix_from_inputs(task_id: str, site: str, inputs: Iterable[str], site_of: Callable[[str], str],
                    vector_of: Callable[[str], Mapping[str, float]], mix_of: Callable[[str], Mapping[Group, float]]
                    ) -> dict[Group, float]:
    """A task's path mix: per source, the paths its data arrives by, each weighted by what that input carries
    of the source over all the task's inputs carry of it (the weights of a source sum to 1).

    >>> mix_from_inputs("k", "y", ("s", "f"), {"s": "x", "f": "y"}.__getitem__,
    ...                 {"s": {"s": 3.0}, "f": {"s": 1.0}}.__getitem__, {"s": {("s", ()): 1.0}, "f": {("s", ()): 1.0}}.__getitem__)
    {('s', (('x', 'y'),)): 0.75, ('s', ()): 0.25}
    """
    weighted: dict[Group, float] = {}
    carried: dict[str, float] = {}
    any_input = False
    for parent in inputs:
        any_input = True
        parent_site = site_of(parent)
        hop = (parent_site, site) if parent_site != site else None
        vector = vector_of(parent)
        for source, full in vector.items():
            carried[source] = carried.get(source, 0.0) + full
        for (source, path), weight in mix_of(parent).items():
            key = (source, path + (hop,)) if hop else (source, path)
            weighted[key] = weighted.get(key, 0.0) + vector.get(source, 0.0) * weight
    if not any_input:
        return {(task_id, ()): 1.0}
    return {group: value / carried[group[0]] for group, value in weighted.items()
            if value > 0 and carried[group[0]] > 0}


class Laid:
    """A plan's new tasks (parents first) laid over a running set without changing it: each one's kept inputs
    (those running or added before it), rate and source vector; how often each task is read by them; and the
    crossings they start (a producer's stream reaching a site it did not reach), in order. The flow index's
    weighings read both models from it."""

    def __init__(self, index: Structure, tasks: Iterable[NewTask]) -> None:
        self.index = index
        self.sites: dict[str, str] = {}
        self.rates: dict[str, float] = {}
        self.vectors: dict[str, dict[str, float]] = {}
        self.inputs: dict[str, tuple[str, ...]] = {}
        self.read: dict[str, int] = {}
        self.crossings: list[tuple[str, Link]] = []  # (producer, link)
        crossed: set[tuple[str, str]] = set()
        for task in tasks:
            kept = tuple(parent for parent in task.inputs if parent in index.sites or parent in self.sites)
            self.sites[task.id], self.rates[task.id], self.inputs[task.id] = task.site, task.rate_mbps, kept
            self.vectors[task.id] = vector_from_inputs(task.id, kept, task.rate_mbps, self.rate, self.vector)
            for parent in kept:
                self.read[parent] = self.read.get(parent, 0) + 1
                parent_site = self.site(parent)
                if parent_site == task.site or (parent, task.site) in crossed or index.arrivals.get((parent, task.site)):
                    continue
                crossed.add((parent, task.site))
                self.crossings.append((parent, (parent_site, task.site)))

    def site(self, task: str) -> str:
        return self.sites[task] if task in self.sites else self.index.sites[task]

    def rate(self, task: str) -> float:
        return self.rates[task] if task in self.rates else self.index.rates[task]

    def vector(self, task: str) -> Mapping[str, float]:
        return self.vectors[task] if task in self.vectors else self.index.vectors[task]

    def new_sinks(self) -> list[str]:
        """The new tasks with inputs that no new task reads."""
        return [task_id for task_id, kept in self.inputs.items() if kept and task_id not in self.read]

    def former_sinks(self) -> list[str]:
        """The running sinks a new task reads."""
        index = self.index
        return [parent for parent in self.read if parent in index.sites and index.readers[parent] == 0 and index.inputs[parent]]


def adding(index: Structure, model: PathModel, tasks: Iterable[NewTask]) -> tuple[Change, dict[str, dict[Group, float]]]:
    """The change of adding ``tasks`` (parents first; inputs neither running nor added before are left out) and
    their path mixes. Neither ``index`` nor ``model`` is changed."""
    laid = Laid(index, tasks)
    mixes: dict[str, dict[Group, float]] = {}

    def mix_of(task: str) -> Mapping[Group, float]:
        return mixes[task] if task in mixes else model.mix[task]

    for task_id, kept in laid.inputs.items():
        mixes[task_id] = mix_from_inputs(task_id, laid.sites[task_id], kept, laid.site, laid.vector, mix_of)
    change = Change()
    for producer, link in laid.crossings:
        change.cross(link, laid.vector(producer), mix_of(producer), +1)
    for task_id in laid.new_sinks():
        change.sink(laid.rate, laid.vectors[task_id], mixes[task_id], +1)
    for parent in laid.former_sinks():
        change.sink(laid.rate, index.vectors[parent], model.mix[parent], -1)
    return change, mixes


def dropping(index: Structure, model: PathModel, task: str) -> Change:
    """The change of dropping ``task``, which nothing reads (so it crosses no link)."""
    change = Change()
    site, inputs = index.sites[task], index.inputs[task]
    rate_of = index.rates.__getitem__
    if inputs:
        change.sink(rate_of, index.vectors[task], model.mix[task], -1)
    for parent in dict.fromkeys(inputs):
        parent_site, count = index.sites[parent], inputs.count(parent)
        if parent_site != site and index.arrivals.get((parent, site), 0) == count:
            change.cross((parent_site, site), index.vectors[parent], model.mix[parent], -1)
        if index.readers[parent] == count and index.inputs[parent]:
            change.sink(rate_of, index.vectors[parent], model.mix[parent], +1)
    return change


@dataclass
class BufferedState:
    """The link fractions and the sinks' total of the running set at ``scale`` times its source rates."""

    scale: float
    capacity: Callable[[str, str], float]
    capacities: dict[Link, float] = field(default_factory=dict)
    frac: dict[Link, float] = field(default_factory=dict)
    total: float = 0.0
    commits: int = 0

    def link_capacity(self, link: Link) -> float:
        """The link's capacity for these streams (never below 0), cached: :meth:`recheck` renews the cache."""
        if link not in self.capacities:
            self.capacities[link] = max(0.0, self.capacity(*link))
        return self.capacities[link]

    def recheck(self, capacity: Callable[[str, str], float], model: PathModel) -> None:
        """Take ``capacity`` from now on; the links whose capacity it changes are solved again from where the
        fractions are (and, as they move, the links whose groups cross them)."""
        if capacity is self.capacity:
            return
        self.capacity = capacity
        changed = [link for link, known in self.capacities.items() if abs(max(0.0, capacity(*link)) - known) > 1e-9]
        if changed:
            for link in changed:
                del self.capacities[link]
            frac, total = settle(model, self, Change(), changed)
            self.commit(frac, total, model)

    @classmethod
    def build(cls, model: PathModel, scale: float, capacity: Callable[[str, str], float]) -> "BufferedState":
        """The state of the whole model, every link solved from full fractions."""
        state = cls(scale, capacity)
        state.total = scale * sum(weight for weight, _ in model.sinks.values())
        frac, total = settle(model, state, Change(), model.links)
        state.commit(frac, total, model)
        return state

    def commit(self, frac: Mapping[Link, float], total: float, model: PathModel, touched: Iterable[Link] = ()) -> None:
        """Write a settled change's fractions and total (after :meth:`PathModel.apply`); a link the change
        ``touched`` or moved that no stream crosses any more is forgotten."""
        self.frac.update(frac)
        for link in (*frac, *touched):
            if link not in model.links:
                self.frac.pop(link, None)
                self.capacities.pop(link, None)
        self.total = total
        self.commits += 1
        if self.commits % RECOUNT_EVERY == 0 or not model.sinks:  # the sum kept by differences, summed again
            self.total = self.scale * sum(weight * _product(group[1], self.frac) for group, (weight, _) in model.sinks.items())


def _product(path: Path, frac: Mapping[Link, float]) -> float:
    value = 1.0
    for link in path:
        value *= frac.get(link, 1.0)
    return value


def settle(model: PathModel, state: BufferedState, change: Change, dirty: Iterable[Link]) -> tuple[dict[Link, float], float]:
    """The fractions that move and the sinks' total with ``change`` on top of ``model`` and ``state``, solving the
    ``dirty`` links again and, as their fractions move, the links whose groups cross them. Neither is changed, but
    for the capacities ``state`` caches (:meth:`BufferedState.link_capacity`); call before :meth:`PathModel.apply`.

    >>> model, state = PathModel(), BufferedState(1.0, lambda src, dst: 5.0)
    >>> change, _ = adding(_Tiny(), model, [NewTask("s", "x", (), 20.0), NewTask("k", "y", ("s",), 20.0)])
    >>> settle(model, state, change, change.links)   # 20 Mbps over 5: a quarter arrives
    ({('x', 'y'): 0.25}, 5.0)
    """
    frac: dict[Link, float] = {}
    extra: dict[Link, set[Link]] = {}  # readers of a link among the change's groups
    for link, groups in change.links.items():
        for _, path in groups:
            for crossed in dict.fromkeys(path):
                extra.setdefault(crossed, set()).add(link)

    def fraction(link: Link) -> float:
        return frac[link] if link in frac else state.frac.get(link, 1.0)

    products: dict[Path, float] = {}  # many groups share a path: each product once until a fraction moves

    def product(path: Path) -> float:
        value = products.get(path)
        if value is None:
            value = 1.0
            for link in path:
                value *= frac[link] if link in frac else state.frac.get(link, 1.0)
            products[path] = value
        return value

    queue = deque(dict.fromkeys(dirty))
    queued = set(queue)
    moves: dict[Link, int] = {}
    while queue:
        link = queue.popleft()
        queued.discard(link)
        load = state.scale * _load(model.links.get(link, {}), change.links.get(link), product)
        capacity = state.link_capacity(link)
        new = 1.0 if load <= capacity else capacity / load
        old = fraction(link)
        if abs(new - old) <= SETTLED:
            continue
        moves[link] = moves.get(link, 0) + 1
        if moves[link] > ROUNDS:  # a cycle through links that has not settled (as decoupled_rates' rounds)
            continue
        if moves[link] > UNDAMPED_ROUNDS:  # a loop through links swings: half way (as decoupled_rates)
            new = (new + old) / 2
        frac[link] = new
        products.clear()
        for reader in (*model.readers.get(link, ()), *extra.get(link, ())):
            if reader not in queued:
                queued.add(reader)
                queue.append(reader)
    total = state.total
    seen: set[Group] = set()
    for link in frac:
        for group in model.sink_groups.get(link, ()):
            if group not in seen:
                seen.add(group)
                total += state.scale * model.sinks[group][0] * (product(group[1]) - _product(group[1], state.frac))
    for group, (weight, terms) in change.sinks.items():
        known = model.sinks.get(group)
        if known is not None and known[1] + terms == 0:
            weight = -known[0]  # the group leaves: take off exactly what it added
        total += state.scale * weight * product(group[1])
    return frac, total


class _Tiny:
    """An empty running set (for the examples)."""

    sites: dict = {}
    inputs: dict = {}
    rates: dict = {}
    vectors: dict = {}
    readers: dict = {}
    arrivals: dict = {}
    link_producers: dict = {}


def _load(groups: Mapping[Group, list], changed: Mapping[Group, list] | None, product: Callable[[Path], float]) -> float:
    """A link's load at full scale: its groups' weights (with a change's on top) times their products."""
    load = 0.0
    if changed is None:
        for (_, path), (weight, _) in groups.items():
            load += weight * product(path)
        return load
    for group, (weight, terms) in groups.items():
        delta = changed.get(group)
        if delta is not None:
            if terms + delta[1] == 0:
                continue
            weight += delta[0]
        load += weight * product(group[1])
    for group, (weight, terms) in changed.items():
        if group not in groups and terms:
            load += weight * product(group[1])
    return load
