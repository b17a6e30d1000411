"""``python -m wan_sim SCENARIO --policy P`` (also ``sana wan-sim``): simulate a scenario, print JSON.

It needs no server. Exit codes as the ``sana`` CLI's: 0 success, 2 a bad
scenario or policy (the message names the field).
"""

from __future__ import annotations

import argparse
import json
import sys

from sana.exceptions import SanaError
from wan_sim.policies import POLICIES
from wan_sim.scenario import load_scenario
from wan_sim.simulate import simulate

EXIT_OK, EXIT_USAGE = 0, 2


def parser() -> argparse.ArgumentParser:
    """The command line of the simulator."""
    parsed = argparse.ArgumentParser(
        prog="sana wan-sim",
        description="Place the scenario's queries under a sharing policy and report throughput, WAN Mbps "
                    "and latency from the flow model (docs/wan.md).",
    )
    parsed.add_argument("scenario", help="scenario file (JSON, see docs/wan.md)")
    parsed.add_argument("--policy", default="sana", choices=[*POLICIES, "all"],
                        help="sharing policy (default sana); 'all' runs every policy")
    parsed.add_argument("--summary", action="store_true", help="only the summary (no links, epochs, placement)")
    return parsed


def run(args: argparse.Namespace) -> int:
    """Print the simulation of ``args.scenario`` as JSON on stdout."""
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
    return run(parser().parse_args(sys.argv[1:] if argv is None else argv))
