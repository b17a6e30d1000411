"""Where a Java Flight Recorder profile's CPU samples fall: by thread, and by method within some threads.

Run:  jcmd <spark jvm pid> JFR.start settings=profile duration=120s filename=/tmp/sana.jfr
      .venv/bin/python -m benchmarks.jfr_summary /tmp/sana.jfr                        # by kind of thread
      .venv/bin/python -m benchmarks.jfr_summary /tmp/sana.jfr --thread serve-Arrow   # methods on its stacks

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


def samples(path: str) -> list[dict[str, Any]]:
    """The recording's execution samples (thread and stack), as the ``jfr`` tool prints them."""
    printed = subprocess.run(["jfr", "print", "--json", "--events", "jdk.ExecutionSample", "--stack-depth", "256", path],
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recording")
    parser.add_argument("--thread", default=None, help="list methods on the stacks of threads whose name matches")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
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
