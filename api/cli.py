"""The ``sana`` command line (docs/architecture.md, "Interfaces clients rely on").

Exit codes scripts can trust: 0 success; 1 the server answered with an error
(its message is printed as it is); 2 bad usage or an unreadable file; 3 the
API cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

from api import cli_tail
from api.exit_codes import EXIT_OK, EXIT_SERVER, EXIT_UNREACHABLE, EXIT_USAGE
DEFAULT_API = "http://127.0.0.1:8000"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "up":
        return _up(args)
    if args.command == "serve":
        return _serve(args)
    if args.command == "produce":
        return _produce(args)
    try:
        return args.handler(args)
    except httpx.TransportError as error:
        print(f"sana: cannot reach the API at {args.api}: {error}", file=sys.stderr)
        return EXIT_UNREACHABLE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sana", description="Shared streaming dataflows.")
    parser.add_argument("--api", default=os.environ.get("SANA_API_URL", DEFAULT_API),
                        help=f"API address (env SANA_API_URL, default {DEFAULT_API})")
    parser.add_argument("--token", default=os.environ.get("SANA_TOKEN"),
                        help="bearer token of a service with tokens (env SANA_TOKEN; not needed in single-user mode)")
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="start the broker, Redis if needed, and the API")
    up.add_argument("--port", type=int, help="API port (default SANA_API_PORT or 8000)")
    up.add_argument("--host", help="API address (default SANA_API_HOST or 127.0.0.1)")
    up.add_argument("--dry-run", action="store_true", help="plan and record deployments without Spark or Kafka")
    up.add_argument("--demo", action="store_true",
                    help="create demo source topics, generate sensor streams and submit the dataflows in examples/ "
                    "that do not run yet")
    up.add_argument("--ephemeral", action="store_true",
                    help="keep nothing across runs: the broker in memory, no state file, checkpoints in the run's folder "
                    "(default: all kept in SANA_DATA_DIR, .sana/data)")

    reset = commands.add_parser("reset", help="delete what sana up keeps across runs: the data folder (broker records, "
                                "embedded state), the checkpoints and the state keys under SANA_STATE_PREFIX")
    reset.add_argument("--yes", "-y", action="store_true", help="do not ask first")
    reset.set_defaults(handler=_reset)

    serve = commands.add_parser("serve", help="serve the API alone on the configured Redis and Kafka (the image's command); "
                                "without SANA_TOKENS_FILE, on loopback only")
    serve.add_argument("--port", type=int, help="API port (default SANA_API_PORT or 8000)")
    serve.add_argument("--host", help="API address (default SANA_API_HOST or 127.0.0.1)")

    cluster = commands.add_parser("spark-cluster", help="run a Spark standalone cluster here (a master and workers, "
                                  "separate JVMs) for SANA_SPARK_MASTER=spark://...; Ctrl-C stops it")
    cluster.add_argument("--workers", type=int, default=2, help="workers (default 2)")
    cluster.add_argument("--cores", type=int, default=1, help="cores each worker offers (default 1)")
    cluster.add_argument("--memory", default="1g", help="memory each worker offers (default 1g)")
    cluster.add_argument("--port", type=int, default=7077, help="the master's port (default 7077)")
    cluster.add_argument("--dir", type=Path, default=Path(".sana/spark-cluster"), help="logs and work directories")
    cluster.set_defaults(handler=_spark_cluster)

    produce = commands.add_parser("produce", help="generate a RIoTBench-style sensor stream into a topic")
    produce.add_argument("topic")
    produce.add_argument("--kind", choices=("urban", "taxi", "grid", "model"), default="urban", help="stream kind (default urban)")
    produce.add_argument("--rate", type=float, default=100.0, help="records per second (default 100)")
    produce.add_argument("--seed", type=int, default=1, help="seed of the record contents (default 1)")
    produce.add_argument("--start", help="event time of the first record, ISO-8601 (default: now, live); "
                                          "record i is at start + i/rate, so seed and start fix the whole stream")
    produce.add_argument("--count", type=int, help="stop after this many records")
    produce.add_argument("--duration", type=float, help="stop after this many seconds")
    produce.add_argument("--entities", type=int, default=20, help="sensors, taxis or meters (default 20)")
    produce.add_argument("--partitions", type=int, default=1, help="partitions if the topic must be created (default 1)")
    produce.add_argument("--bootstrap", help="Kafka bootstrap (default SANA_KAFKA_BOOTSTRAP or the embedded broker)")
    produce.set_defaults(handler=_produce)

    submit = commands.add_parser("submit", help="submit a dataflow from a JSON file ('-' reads stdin)")
    submit.add_argument("file")
    submit.add_argument("--json", action="store_true", help="print the server's JSON answer")
    submit.add_argument("--unique", action="store_true", help="refuse (409) a dataflow identical to one of yours "
                        "already running (same sinks, same topics), instead of a warning")
    submit.set_defaults(handler=_submit)

    remove = commands.add_parser("remove", help="remove a submitted dataflow")
    remove.add_argument("id")
    remove.add_argument("--json", action="store_true")
    remove.set_defaults(handler=_remove)

    listing = commands.add_parser("ls", help="list submitted dataflows")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_ls)

    stats = commands.add_parser("stats", help="what is submitted, what runs, what sharing saves")
    stats.add_argument("--json", action="store_true")
    stats.set_defaults(handler=_stats)

    cost = commands.add_parser("cost", help="what a dataflow costs, its share of each task, what sharing saves it")
    cost.add_argument("id")
    cost.add_argument("--json", action="store_true")
    cost.set_defaults(handler=_cost)

    tail = commands.add_parser("tail", help="print a topic's records as JSON lines, each once; Ctrl-C stops",
                               description=cli_tail.DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    tail.add_argument("topic")
    tail.add_argument("-b", "--from-start", action="store_true", help="from the topic's first record (default: from now)")
    tail.add_argument("-n", dest="count", type=int, metavar="N", help="stop after N records")
    tail.add_argument("--raw", action="store_true", help="print every copy of a replayed record")
    tail.add_argument("--headers", action="store_true", help="print whole records: partition, offset, key, headers, value")
    tail.set_defaults(handler=cli_tail.tail)

    defrag = commands.add_parser("defrag", help="run queries linked by taps as one query (nothing lost or repeated)")
    defrag.add_argument("--json", action="store_true")
    defrag.set_defaults(handler=_defrag)

    replace = commands.add_parser("replace", help="move work off WAN links at or above a utilization (re-placement)")
    replace.add_argument("--utilization", type=float, default=0.95, help="links at or above this load / capacity (default 0.95)")
    replace.add_argument("--plan", action="store_true", help="only show what would move (GET); by default carry it out")
    replace.add_argument("--json", action="store_true")
    replace.set_defaults(handler=_replace)

    token = commands.add_parser("token", help="make a token for the tokens file (SANA_TOKENS_FILE)")
    token_commands = token.add_subparsers(dest="token_command", required=True)
    new = token_commands.add_parser("new", help="print a fresh token and the principal entry holding its hash")
    new.add_argument("name", help="the principal's name (1-64 of A-Za-z0-9_.@-)")
    new.add_argument("--role", choices=("user", "admin"), default="user")
    new.set_defaults(handler=_token_new)

    # The simulator sits above the service (wan_sim/): the CLI runs it as a program rather than import it.
    wan = commands.add_parser("wan-sim", add_help=False, help="simulate a WAN scenario under a sharing policy and "
                              "print JSON (python -m wan_sim SCENARIO --policy P; --help for its options)")
    wan.add_argument("arguments", nargs=argparse.REMAINDER)
    wan.set_defaults(handler=_wan_sim)
    return parser


def _server_settings(args: argparse.Namespace, **overrides: Any):
    """Log as a server does, and the settings with the command line's host and port."""
    import logging

    from sana.settings import Settings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    if args.port is not None:
        overrides["api_port"] = args.port
    if args.host is not None:
        overrides["api_host"] = args.host
    return Settings(**overrides)


def _up(args: argparse.Namespace) -> int:
    from api.launcher import up

    overrides = {**({"dry_run": True} if args.dry_run else {}), **({"ephemeral": True} if args.ephemeral else {})}
    return up(_server_settings(args, **overrides), demo=args.demo)


def _reset(args: argparse.Namespace) -> int:
    from api.data_dir import DataDirBusy, reset
    from sana.settings import Settings

    settings = Settings()
    if not args.yes:
        if not sys.stdin.isatty():
            print("sana: reset deletes every kept record and dataflow; run it on a terminal or with --yes", file=sys.stderr)
            return EXIT_USAGE
        answer = input(f"delete {settings.data_dir}, {settings.checkpoint_dir} and the state under "
                       f"{settings.state_prefix}: in {settings.redis_url}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("sana: nothing deleted", file=sys.stderr)
            return EXIT_OK
    try:
        reset(settings, lambda line: print(f"sana reset: {line}"))
    except DataDirBusy as error:
        print(f"sana: {error.message}", file=sys.stderr)
        return EXIT_SERVER
    return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    from api.launcher import serve

    return serve(_server_settings(args))


def _wan_sim(args: argparse.Namespace) -> int:
    return subprocess.call([sys.executable, "-m", "wan_sim", *args.arguments])


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _spark_cluster(args: argparse.Namespace) -> int:
    import signal
    import time

    from runtime.exceptions import RuntimeFailure
    from runtime.spark.standalone import StandaloneCluster

    if args.workers < 1 or args.cores < 1:
        print("sana: --workers and --cores must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    cluster = StandaloneCluster(args.dir, args.workers, args.cores, args.memory, port=args.port)
    print(f"starting a Spark master and {args.workers} worker(s) of {args.cores} core(s) and {args.memory}; "
          f"logs in {args.dir}", flush=True)
    try:
        cluster.start()
    except RuntimeFailure as error:
        print(f"sana: {error.message}", file=sys.stderr)
        return EXIT_UNREACHABLE
    print(f"Spark master at {cluster.master_url}: run Sana with SANA_SPARK_MASTER={cluster.master_url}; "
          "Ctrl-C stops the cluster", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        while all(daemon.alive() for daemon in cluster.daemons):
            time.sleep(1)
        print("sana: a Spark daemon exited; stopping the cluster", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        print("stopping the Spark cluster")
        return EXIT_OK
    finally:
        cluster.stop()


def _produce(args: argparse.Namespace) -> int:
    from runtime.broker.rdkafka import KafkaException
    from runtime.broker.topics import Topics
    from runtime.exceptions import RuntimeFailure, TopicProblem
    from runtime.workload import produce
    from sana.settings import Settings

    if args.rate <= 0:
        print("sana: --rate must be positive", file=sys.stderr)
        return EXIT_USAGE
    start = None
    if args.start is not None:
        try:
            start = datetime.fromisoformat(args.start.replace("Z", "+00:00"))
        except ValueError:
            print(f"sana: --start {args.start!r} is not an ISO-8601 time (e.g. 2026-01-01T00:00:00Z)", file=sys.stderr)
            return EXIT_USAGE
        start = start if start.tzinfo else start.replace(tzinfo=timezone.utc)
    bootstrap = args.bootstrap or Settings().effective_kafka_bootstrap
    topics = Topics(bootstrap, args.partitions)
    try:
        if topics.ensure([args.topic]):
            print(f"created topic {args.topic} ({args.partitions} partition(s))")
    except TopicProblem as error:
        print(f"sana: {error.message}", file=sys.stderr)
        return EXIT_UNREACHABLE
    finally:
        topics.close()
    limit = f"{args.count} records" if args.count else (f"{args.duration:g} s" if args.duration else "until Ctrl-C")
    print(f"producing {args.kind} records to {args.topic} at {bootstrap}: {args.rate:g}/s, seed {args.seed}, {limit}", flush=True)
    try:
        sent = produce(bootstrap, args.topic, args.kind, args.rate, args.seed, count=args.count,
                       duration_s=args.duration, start=start, entities=args.entities)
    except KeyboardInterrupt:
        print("stopped")
        return EXIT_OK
    except RuntimeFailure as error:
        print(f"sana: cannot produce to {bootstrap}: {error.message}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except (KafkaException, OSError) as error:
        print(f"sana: cannot produce to {bootstrap}: {error}", file=sys.stderr)
        return EXIT_UNREACHABLE
    print(f"produced {sent} records to {args.topic}")
    return EXIT_OK


def _token_new(args: argparse.Namespace) -> int:
    from sana.auth import NAME, new_token, token_hash

    if not NAME.match(args.name):
        print(f"sana: principal name {args.name!r}: use 1-64 of A-Za-z0-9_.@-", file=sys.stderr)
        return EXIT_USAGE
    token = new_token()
    print(f"token for {args.name} (shown once; give it to them, keep only the entry below):\n  {token}")
    print("entry for the tokens file's \"principals\" list:")
    print("  " + json.dumps({"name": args.name, "role": args.role, "token_sha256": token_hash(token)}))
    return EXIT_OK


def _call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {args.token}"} if getattr(args, "token", None) else {}
    with httpx.Client(base_url=args.api, timeout=120, headers=headers) as client:
        response = client.request(method, path, **kwargs)
    try:
        body = response.json()
    except ValueError:
        body = {"detail": response.text}
    if response.is_error:
        if getattr(args, "json", False):
            print(json.dumps(body, indent=2))
        else:
            print(f"sana: {response.status_code}: {body.get('detail', body)}", file=sys.stderr)
        return EXIT_SERVER, body
    return EXIT_OK, body


def _submit(args: argparse.Namespace) -> int:
    try:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as error:
        print(f"sana: cannot read {args.file}: {error.strerror}", file=sys.stderr)
        return EXIT_USAGE
    status, body = _call(args, "POST", "/dataflows", content=data, headers={"content-type": "application/json"},
                         params={"unique": "true"} if args.unique else None)
    if status != EXIT_OK:
        return status
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        print(f"submitted {body['id']} ({body['name']}): {len(body['reused'])} task(s) reused, "
              f"{len(body['created'])} created")
        rows = [(task, running, "reused" if task in body["reused"] else "created")
                for task, running in body["tasks"].items()]
        _print_table(("TASK", "RUNNING TASK", "STATUS"), rows)
        for sink, target in body["sinks"].items():
            print(f"sink {sink}: output on topic {target['topic']} (running task {target['running_task']})")
    sys.stdout.flush()  # the warnings come last, where a terminal shows them
    for warning in body.get("warnings", ()):
        print(f"sana: warning: {warning}", file=sys.stderr)
    return EXIT_OK


def _remove(args: argparse.Namespace) -> int:
    status, body = _call(args, "DELETE", f"/dataflows/{args.id}")
    if status != EXIT_OK:
        return status
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        stopped = ", ".join(body["terminated"]) or "nothing (all of its tasks are shared)"
        print(f"removed {body['id']}; stopped: {stopped}")
    return EXIT_OK


def _ls(args: argparse.Namespace) -> int:
    status, body = _call(args, "GET", "/dataflows")
    if status != EXIT_OK:
        return status
    if args.json:
        print(json.dumps(body, indent=2))
        return EXIT_OK
    rows = [(flow["id"], flow["name"], flow.get("owner") or "-", flow["submitted_at"], str(len(flow["tasks"])),
             status_line(flow)) for flow in body["dataflows"]]
    _print_table(("ID", "NAME", "OWNER", "SUBMITTED", "TASKS", "STATUS"), rows)
    return EXIT_OK


def status_line(flow: dict) -> str:
    """A dataflow's status in a line: what failed and why, or what waits.

    >>> status_line({"status": "running"})
    'running'
    >>> status_line({"status": "failed", "failure": {"task": "hot", "error_class": "DATETIME_OVERFLOW",
    ...              "expression": "timestampadd(DAY, n, ts) > ts", "error": "[DATETIME_OVERFLOW] ..."}})
    'failed: task hot, DATETIME_OVERFLOW in timestampadd(DAY, n, ts) > ts (remove it, fix it, submit it again)'
    >>> status_line({"status": "stalled", "stalled": {"tasks": ["out"], "restarts": 3}})
    'stalled: its Spark query restarts (3 restarts so far; it resumes from its checkpoint)'
    """
    state = flow.get("status", "running")
    if state == "failed" and flow.get("failure"):
        failure = flow["failure"]
        what = failure.get("error_class") or failure.get("error") or "an error"
        where = f" in {failure['expression']}" if failure.get("expression") else ""
        return f"failed: task {failure['task']}, {what}{where} (remove it, fix it, submit it again)"
    if state == "stalled":
        restarts = (flow.get("stalled") or {}).get("restarts", 0)
        return f"stalled: its Spark query restarts ({restarts} restarts so far; it resumes from its checkpoint)"
    return state


def _stats(args: argparse.Namespace) -> int:
    status, body = _call(args, "GET", "/stats")
    if status != EXIT_OK:
        return status
    if args.json:
        print(json.dumps(body, indent=2))
        return EXIT_OK
    rows = [(key, json.dumps(value) if isinstance(value, dict) else str(value)) for key, value in body.items()]
    _print_table(("STAT", "VALUE"), rows)
    return EXIT_OK


def _cost(args: argparse.Namespace) -> int:
    status, body = _call(args, "GET", f"/dataflows/{args.id}/cost")
    if status != EXIT_OK:
        return status
    if args.json:
        print(json.dumps(body, indent=2))
        return EXIT_OK
    if body.get("status", "running") != "running":  # its work does not run: a zero cost would mislead
        print(f"{body['id']}: {status_line(body)}; its work does not run now, so the figures below are not what it costs when it runs")
    if not body["measured"]:
        print(f"{body['id']}: nothing measured yet (a dry run measures nothing; a real runtime needs two samples, ~5 s)")
    else:
        print(f"{body['id']}: measured over the last {body['window_s']:.0f} s")
    rows = [(what, _figure("cpu_cores", body[what]["cpu_cores"]), _figure("kafka_bytes_per_s", body[what]["kafka_bytes_per_s"]),
             _figure("state_bytes", body[what]["state_bytes"])) for what in ("cost", "alone", "saved")]
    _print_table(("", "CPU", "KAFKA WRITES", "STATE"), rows)
    print()
    tasks = [(", ".join(task.get("submitted") or []) or "-", task["task"],
              "-" if task.get("users") is None else str(task["users"]), _figure("cpu_cores", task["cpu_cores"]),
              _figure("kafka_bytes_per_s", task["kafka_bytes_per_s"]), _figure("state_bytes", task["state_bytes"]))
             for task in body["tasks"]]
    _print_table(("TASK", "RUNNING AS", "USERS", "CPU SHARE", "KAFKA SHARE", "STATE SHARE"), tasks)
    return EXIT_OK


def _defrag(args: argparse.Namespace) -> int:
    print("defragmenting: each merged group pauses for about a query start ...", file=sys.stderr, flush=True)
    status, body = _call(args, "POST", "/runtime/defrag")
    if status != EXIT_OK:
        return status
    if args.json:
        print(json.dumps(body, indent=2))
        return EXIT_OK
    print(f"queries: {body['queries_before']} -> {body['queries_after']}" + (f" ({body['note']})" if body.get("note") else ""))
    for group in body["merged"]:
        print(f"merged {', '.join(group['queries'])} into {group['into']}")
    for group in body["skipped"]:
        print(f"left {', '.join(group['queries'])} as they were: {group['error']}")
    return EXIT_OK


def _replace(args: argparse.Namespace) -> int:
    if not args.plan:
        print("re-placing: the queries handing work over pause until they drain to the cut ...", file=sys.stderr, flush=True)
    status, body = _call(args, "GET" if args.plan else "POST", "/wan/replacement", params={"utilization": args.utilization})
    if status != EXIT_OK:
        return status
    if args.json:
        print(json.dumps(body, indent=2))
        return EXIT_OK
    hot = ", ".join(f"{row['from']} -> {row['to']} ({100 * row['utilization']:.0f} %)" for row in body["hot_links"])
    print(f"links at or above {100 * args.utilization:.0f} %: {hot or 'none'}")
    for flow in body["dataflows"]:
        if "error" in flow:
            print(f"{flow['dataflow']} ({flow['name']}): left as it is: {flow['error']['detail']}")
            continue
        moves = "; ".join(f"{move['task']} {move['from']['site']} -> {move['to']['site']}"
                          + (" (stops sharing)" if move["from"]["shared"] and move["to"]["new"] else "")
                          for move in flow["moves"])
        print(f"{flow['dataflow']} ({flow['name']}): {moves or 'stays as it is'}")
    verb = "would start" if args.plan else "started"
    print(f"{verb} {len(body['start'])} running task(s), {'would stop' if args.plan else 'stopped'} {len(body['stop'])}"
          + (f"; paused {body['hand_over']['paused_s']:.1f} s" if body.get("hand_over", {}).get("paused_s") is not None else ""))
    return EXIT_OK


def _figure(metric: str, value: float) -> str:
    """``cpu_cores`` as cores, the others as bytes (per second for Kafka writes).

    >>> _figure("cpu_cores", 0.01234), _figure("kafka_bytes_per_s", 20480.0), _figure("state_bytes", 3.5e6)
    ('0.012 cores', '20.0 KiB/s', '3.3 MiB')
    """
    if metric == "cpu_cores":
        return f"{value:.3f} cores"
    unit = "B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            break
        value /= 1024
    text = f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
    return text + ("/s" if metric == "kafka_bytes_per_s" else "")


def _print_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    for row in (header, *rows):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())


if __name__ == "__main__":
    sys.exit(main())
