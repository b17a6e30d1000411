"""``sana wan-sim SCENARIO --policy P``: run the WAN simulator on a scenario file and print JSON.

Wired into ``api/cli.py`` with ``add_wan_sim_parser(commands)``; it needs no
server. Exit codes as the rest of the CLI: 0 success, 2 a bad scenario or
policy (the message names the field).
"""

from __future__ import annotations

import argparse
import json
import sys

EXIT_OK, EXIT_USAGE = 0, 2


def add_wan_sim_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``wan-sim`` command to an ``argparse`` subparsers object."""
    from wan_sim.policies import POLICIES

    parser = subparsers.add_parser(
        "wan-sim",
        help="simulate a WAN scenario under a sharing policy and print JSON",
        description="Place the scenario's queries under a sharing policy and report throughput, WAN Mbps "
                    "and latency from the flow model (docs/wan.md).",
    )
    parser.add_argument("scenario", help="scenario file (JSON, see docs/wan.md)")
    parser.add_argument("--policy", default="sana", choices=[*POLICIES, "all"],
                        help="sharing policy (default sana); 'all' runs every policy")
    parser.add_argument("--summary", action="store_true", help="only the summary (no links, epochs, placement)")
    parser.set_defaults(handler=run_wan_sim)
    return parser


def run_wan_sim(args: argparse.Namespace) -> int:
    """Handler of ``sana wan-sim``: prints the simulation as JSON on stdout."""
    from sana.errors import SanaError
    from wan_sim.policies import POLICIES
    from wan_sim.scenario import load_scenario
    from wan_sim.simulate import simulate

    try:
        scenario = load_scenario(args.scenario)
        if args.policy == "all":
            output = {name: simulate(scenario, name).to_dict(detail=not args.summary) for name in POLICIES}
        else:
            output = simulate(scenario, args.policy).to_dict(detail=not args.summary)
    except SanaError as error:
        print(f"sana: {error.message}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(output, indent=2))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Run ``wan-sim`` alone: ``python -m api.cli_wan SCENARIO --policy P``."""
    parser = argparse.ArgumentParser(prog="sana")
    commands = parser.add_subparsers(dest="command", required=True)
    add_wan_sim_parser(commands)
    args = parser.parse_args(["wan-sim", *(sys.argv[1:] if argv is None else argv)])
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
