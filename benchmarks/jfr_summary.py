"""Where a Java Flight Recorder profile's CPU samples fall: by thread, and by method within some threads.

Run:  jcmd <spark jvm pid> JFR.start settings=profile duration=120s filename=/tmp/sana.jfr
      .venv/bin/python -m benchmarks.jfr_summary /tmp/sana.jfr                        # by kind of thread
      .venv/bin/python -m benchmarks.jfr_summary /tmp/sana.jfr --thread serve-Arrow   # methods on its stacks
      .venv/bin/python -m benchmarks.jfr_summary /tmp/sana.jfr --large 524288         # who allocates big objects

``--large`` reads ``jdk.ObjectAllocationOutsideTLAB`` events, which the JDK's
``profile`` settings leave off; record them with a copy that turns them on:

      sed '/ObjectAllocationOutsideTLAB/,/event>/s/control="gc-enabled-high">false/>true/' \
          $JAVA_HOME/lib/jfr/profile.jfc > /tmp/large.jfc
      jcmd <pid> JFR.start settings=/tmp/large.jfc duration=60s filename=/tmp/large.jfr

Threads are grouped by name with digits and ids masked ("stream execution
thread for q#-..." is one kind). With ``--thread`` (a regular expression on the
thread name), a method's share is the fraction of that thread's samples
whose stack holds it anywhere, so the shares of a caller and its callees
overlap. Reads the JDK's ``jfr`` tool's JSON output (jdk.ExecutionSample
events). docs/reuse.md ("Where a hosted query's CPU goes") reads these.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from typing import Any


def samples(path: str, event: str = "jdk.ExecutionSample") -> list[dict[str, Any]]:
    """The recording's ``event`` events (by default execution samples: thread and stack), as the ``jfr`` tool prints them."""
    printed = subprocess.run(["jfr", "print", "--json", "--events", event, "--stack-depth", "256", path],
                             capture_output=True, text=True, check=True).stdout
    return json.loads(printed)["recording"]["events"]


def thread_kind(event: dict[str, Any]) -> str:
    """The sampled thread's name, digits and hex ids masked.

    >>> thread_kind({"values": {"sampledThread": {"javaName": "Executor task launch worker for task 12.0 in stage 3.0"}}})
    'Executor task launch worker for task #.# in stage #.#'
    >>> thread_kind({"values": {"sampledThread": {"javaName": "stream execution thread for q4-85279c72 [id = 1a-2b]"}}})
    'stream execution thread for q#-#'
    """
    thread = event["values"]["sampledThread"] or {}
    name = thread.get("javaName") or thread.get("osName") or "?"
    name = re.sub(r"\[id = .*\]$", "", name).strip()
    return re.sub(r"\d+", "#", re.sub(r"-[0-9a-f]{6,}\b", "-#", name))


def methods(event: dict[str, Any]) -> list[str]:
    """``Class.method`` of each frame, innermost first."""
    trace = event["values"]["stackTrace"]
    return [f"{frame['method']['type']['name'].rsplit('/', 1)[-1]}.{frame['method']['name']}"
            for frame in (trace["frames"] if trace else [])]


def by_thread(events: Iterable[dict[str, Any]]) -> Counter[str]:
    return Counter(thread_kind(event) for event in events)


def by_method(events: Iterable[dict[str, Any]], thread: str) -> tuple[int, Counter[str]]:
    """Samples of the threads matching ``thread``, and in how many of them each method is on the stack."""
    pattern = re.compile(thread)
    chosen = [event for event in events if pattern.search(thread_kind(event))]
    on_stack: Counter[str] = Counter()
    for event in chosen:
        on_stack.update(set(methods(event)))
    return len(chosen), on_stack


# Frames of these packages are the machinery, not the caller that asked for the memory.
_PLUMBING = ("java.", "jdk.", "sun.", "scala.", "com.google.", "io.netty.", "org.apache.arrow.memory.")


def large_allocations(events: Iterable[dict[str, Any]], at_least: int) -> tuple[int, Counter[str]]:
    """Bytes allocated outside TLABs in objects of ``at_least`` bytes or more, by object class and the first
    frame outside Java's and Scala's libraries (who asked for it).

    >>> frame = lambda cls, name: {"method": {"type": {"name": cls}, "name": name}}
    >>> event = {"values": {"allocationSize": 1 << 20, "objectClass": {"name": "byte[]"},
    ...          "stackTrace": {"frames": [frame("java.util.Arrays", "copyOf"), frame("org.x.Plan", "serialize")]}}}
    >>> small = {"values": {**event["values"], "allocationSize": 100}}
    >>> large_allocations([event, small, event], at_least=1000)
    (2097152, Counter({'byte[] <- org.x.Plan.serialize': 2097152}))
    """
    total, by_site = 0, Counter()
    for event in events:
        size = event["values"]["allocationSize"]
        if size < at_least:
            continue
        caller = next((name for name in methods(event) if not name.startswith(_PLUMBING)), "?")
        by_site[f"{(event['values']['objectClass'] or {}).get('name', '?')} <- {caller}"] += size
        total += size
    return total, by_site


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recording")
    parser.add_argument("--thread", default=None, help="list methods on the stacks of threads whose name matches")
    parser.add_argument("--large", type=int, default=None, metavar="BYTES",
                        help="instead: bytes of objects of at least BYTES allocated outside TLABs, by class and caller")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    if args.large is not None:
        total, sites = large_allocations(samples(args.recording, "jdk.ObjectAllocationOutsideTLAB"), args.large)
        print(f"{total / 2**20:,.1f} MiB in objects of {args.large:,} bytes or more")
        for name, size in sites.most_common(args.top):
            print(f"{100 * size / total:5.1f} %  {size / 2**20:9.1f} MiB  {name}")
        return 0
    events = samples(args.recording)
    if not events:
        print("no execution samples in the recording", file=sys.stderr)
        return 1
    if args.thread is None:
        total, counts = len(events), by_thread(events)
    else:
        total, counts = by_method(events, args.thread)
    print(f"{total} samples" + (f" of threads matching {args.thread!r} ({100 * total / len(events):.1f} % of all)"
                                if args.thread else ""))
    for name, count in counts.most_common(args.top):
        print(f"{100 * count / total:5.1f} %  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
