"""``sana tail TOPIC``: a topic's records as JSON lines, each once, through the API (``GET /topics/{topic}/records``).

The first call fixes where to begin (the topic's end now, or its start with
``--from-start``) and says so on stderr; the following ones long-poll with the
answer's cursor, so nothing is printed twice or skipped between calls.
Replayed copies are dropped by the server unless ``--raw``. Ctrl-C, and a
reader that closes the pipe (``| head``), end it quietly with status 0.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Any
from urllib.parse import quote

import httpx

from api.exit_codes import EXIT_OK, EXIT_SERVER, EXIT_USAGE

DESCRIPTION = """\
Print the records of TOPIC, one JSON document per line on stdout: each record's
value (parsed when it is JSON, else its text), or with --headers the whole
record as {"partition", "offset", "key", "headers", "value"}.

It follows the topic from now (or from its first record with --from-start)
until Ctrl-C, or until -n N records are printed. A record Sana writes is named
by its headers sana.writer, sana.batch and sana.seq; a replayed micro-batch is
written again under the same names, and only the first copy of each name is
printed (--raw prints every copy). Records without these headers (sana produce,
clients outside Sana) are always printed.

An admin reads any topic; a user the topics their own dataflows read or write.
Any other topic, or one that does not exist, is an error naming it (status 1)."""

#: How long a call waits on the server when no record is there.
POLL_WAIT_S = 10.0
#: Records asked for per call.
PAGE = 500


def tail(args: argparse.Namespace) -> int:
    """Print the records of ``args.topic`` as :data:`DESCRIPTION` says."""
    from runtime.broker.topics import TOPIC_NAME

    if not TOPIC_NAME.match(args.topic):
        print(f"sana: {args.topic!r} is not a Kafka topic name (1-249 of A-Za-z0-9._-)", file=sys.stderr)
        return EXIT_USAGE
    if args.count is not None and args.count < 1:
        print("sana: -n must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    # Ctrl-C (SIGINT) ends a follow, also where the parent started us with SIGINT ignored (a non-interactive
    # shell's `sana tail ... &`, some process supervisors): Python keeps an ignored SIGINT ignored otherwise.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return _follow(args)
    except KeyboardInterrupt:
        return EXIT_OK
    except BrokenPipeError:  # the reader is gone: later writes (and the exit's flush) go nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _follow(args: argparse.Namespace) -> int:
    """Call the API until ``args.count`` records are printed (for ever without it)."""
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    path = f"/topics/{quote(args.topic, safe='')}/records"
    params: dict[str, Any] = {"from": "start" if args.from_start else "now"}
    left, wait_s = args.count, 0.0
    with httpx.Client(base_url=args.api, headers=headers, timeout=POLL_WAIT_S + 60) as client:
        while left is None or left > 0:
            response = client.get(path, params={**params, "raw": str(args.raw).lower(), "wait_s": wait_s,
                                                "limit": PAGE if left is None else min(PAGE, left)})
            if response.is_error:
                print(f"sana: {response.status_code}: {_detail(response)}", file=sys.stderr)
                return EXIT_SERVER
            body = response.json()
            if "cursor" not in params:
                _announce(args)
            for record in body["records"]:
                print(json.dumps(record if args.headers else record["value"], ensure_ascii=False))
            sys.stdout.flush()
            if left is not None:
                left -= len(body["records"])
            params, wait_s = {"cursor": body["next"]}, POLL_WAIT_S
    return EXIT_OK


def _announce(args: argparse.Namespace) -> None:
    where = "its first record" if args.from_start else "now"
    until = f"until {args.count} record(s) are printed" if args.count else "until Ctrl-C"
    copies = "every copy of a replayed record" if args.raw else "each record once"
    print(f"sana: tailing {args.topic} from {where}, {copies}, {until}", file=sys.stderr, flush=True)


def _detail(response: httpx.Response) -> str:
    """The error's ``detail`` (a validation error's messages joined), or the body's text."""
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        return response.text
    if isinstance(detail, list):
        return "; ".join(str(item.get("msg", item)) if isinstance(item, dict) else str(item) for item in detail)
    return str(detail)
