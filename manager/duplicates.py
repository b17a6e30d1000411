"""Submits that repeat what their owner already runs: found before anything changes, said in the answer.

A dataflow is *identical* to a running one when both have the same owner and
the same sinks writing the same topics: the same set of (sink topic, sink
signature) pairs. A sink's signature covers everything upstream of it (types,
canonical configs, sources' sites, the streams and ports), and validation
leaves no task that reaches no sink, so the sinks say everything a dataflow
computes and where it goes. What does not count: the name, the description,
task ids, the order of tasks and streams, key order and number spelling in
configs. A dataflow identical but for its name is a duplicate all the same
(what runs and what lands in the topics is the same; the name is a label); the
warning says whether the name is the same too. The same computation writing
another topic is not a duplicate: the topic is part of what the user gets.

A duplicate is accepted with a warning and ``duplicate_of`` in the answer, or
refused with :class:`~manager.exceptions.DataflowDuplicate` when the caller asks
for ``unique`` (409, nothing changes). One more warning, no refusal: a
dataflow of the same owner with the *same name* that writes one of the same
topics but computes something else (most likely an edited copy submitted
while the old one still runs: the topic then carries the records of both).

Candidates come from the sink-topic index (an identical dataflow writes the
same topics), so a submit pays per writer of its topics, not per dataflow.
Under ``SANA_SHARING=false`` a running dataflow's signatures are salted with
its id (:func:`manager.merge.isolated`): compared salted alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from manager.exceptions import DataflowDuplicate
from manager.merge import salted
from manager.model import Dataflow
from manager.state import State, SubmittedDataflow

#: A dataflow's sinks as (topic, signature) pairs: what it computes and where it goes.
Fingerprint = frozenset[tuple[str, str]]


def fingerprint(flow: Dataflow) -> Fingerprint:
    """The (topic, signature) pairs of a validated dataflow's sinks."""
    return frozenset((flow.tasks[sink].config["topic"], flow.signatures[sink]) for sink in flow.sinks)


def running_fingerprint(state: State, flow: SubmittedDataflow) -> Fingerprint:
    """The (topic, signature) pairs of a submitted dataflow's sinks, as submitted: a sink of a dataflow that
    containment rewrote (:mod:`manager.containment`) keeps its signature as submitted in its record, since its
    running sink task reads the rewritten graph; the others' is their running sink task's."""
    return frozenset((target["topic"], target.get("signature") or state.tasks[target["running_task"]].signature)
                     for target in flow.sinks.values())


def identical(state: State, running: SubmittedDataflow, submitted: Fingerprint) -> bool:
    """Whether ``running`` computes and writes what a dataflow of fingerprint ``submitted`` would."""
    have = running_fingerprint(state, running)
    return have == submitted or have == frozenset((topic, salted(signature, running.id)) for topic, signature in submitted)


@dataclass(frozen=True)
class Repeats:
    """What a new dataflow repeats of its owner's running ones.

    ``duplicates``: the identical ones, those of the same name first, then oldest first;
    ``namesakes``: those of the same name that write one of its topics (named) but compute something else.
    """

    name: str
    duplicates: tuple[SubmittedDataflow, ...] = ()
    namesakes: tuple[tuple[SubmittedDataflow, str], ...] = ()

    @property
    def duplicate_of(self) -> SubmittedDataflow | None:
        return self.duplicates[0] if self.duplicates else None

    def _which(self, original: SubmittedDataflow) -> str:
        same = ", the same name" if original.name == self.name else ""
        also = [flow.id for flow in self.duplicates[1:]]
        return f"{original.id} ({original.name!r}{same})" + (f" and to {', '.join(also)}" if also else "")

    def refusal(self) -> DataflowDuplicate:
        """The 409 of a ``unique`` submit that has a duplicate."""
        original = self.duplicates[0]
        return DataflowDuplicate(
            f"identical to {self._which(original)}, already running for the same owner (the same sinks writing the "
            f"same topics); nothing changed (unique). Use {original.id} as it is, or remove it first",
            culprit={"dataflow": original.id, "name": original.name})

    def warnings(self, new_id: str, started: int) -> list[str]:
        """The human warnings of the 201 of ``new_id``, which started ``started`` running tasks."""
        said = []
        if self.duplicates:
            original = self.duplicates[0]
            if started:
                cost = (f"{started} task(s) started again (sharing is off, or {original.id}'s failed), "
                        "so while both run the topics get each record twice")
            else:
                cost = "nothing new started and the topics get no extra records"
            said.append(f"identical to {self._which(original)}, already running for the same owner (the same sinks "
                        f"writing the same topics): {cost}. Submitted twice by mistake? sana remove {new_id}. "
                        "sana submit --unique (?unique=true) refuses a duplicate")
        if self.namesakes:
            ids = [flow.id for flow, _ in self.namesakes]
            topics = sorted({topic for _, topic in self.namesakes})
            one = len(ids) == 1
            said.append(f"{' and '.join(ids)} of the same owner {'is' if one else 'are'} also named {self.name!r} and "
                        f"{'writes' if one else 'write'} topic {', '.join(map(repr, topics))} too, but "
                        f"{'computes' if one else 'compute'} something else: the topic gets the records of both. "
                        f"If this one replaces {'it' if one else 'them'}: "
                        + "; ".join(f"sana remove {flow_id}" for flow_id in ids))
        return said


def find_repeats(state: State, flow: Dataflow) -> Repeats:
    """The running dataflows of ``flow``'s owner that ``flow`` repeats (read-only)."""
    submitted = fingerprint(flow)
    topics = sorted({topic for topic, _ in submitted})
    writers = {writer for topic in topics for writer in state.sink_topics.get(topic, ())}
    candidates = {flow_id for writer in writers for flow_id in state.users.get(writer, ())}
    duplicates: list[SubmittedDataflow] = []
    namesakes: list[tuple[SubmittedDataflow, str]] = []
    for flow_id in candidates:
        other = state.dataflows.get(flow_id)
        if other is None or other.owner != flow.owner:
            continue
        if identical(state, other, submitted):
            duplicates.append(other)
        elif other.name == flow.name:
            shared = sorted({target["topic"] for target in other.sinks.values()} & set(topics))
            namesakes.append((other, shared[0]))
    duplicates.sort(key=lambda other: (other.name != flow.name, other.submitted_at, _number(other.id)))
    namesakes.sort(key=lambda pair: (pair[0].submitted_at, _number(pair[0].id)))
    return Repeats(flow.name, tuple(duplicates), tuple(namesakes))


def _number(dataflow_id: str) -> int:
    """``df-12`` -> 12 (ids sort by number, not text)."""
    number = dataflow_id.rpartition("-")[2]
    return int(number) if number.isdigit() else 0
