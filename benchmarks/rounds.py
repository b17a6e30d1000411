"""Variants of a measurement, each in a child process of its own, run in turns so a drift of the machine hits all."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run_in_rounds(module: str, variants: list[str] | tuple[str, ...], rounds: int,
                  arguments: list[str]) -> dict[str, list[dict]]:
    """``python -m module --child VARIANT *arguments`` for every variant, ``rounds`` times over.

    The child prints its result as JSON on its last line; returns every
    variant's results in order. A failing child stops everything, with its stderr.
    """
    runs: dict[str, list[dict]] = {variant: [] for variant in variants}
    for number in range(rounds):
        for variant in variants:
            command = [sys.executable, "-m", module, "--child", variant, *arguments]
            done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
            if done.returncode != 0:
                raise SystemExit(f"{variant} failed:\n{done.stderr[-3000:]}")
            runs[variant].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {number + 1}/{rounds} {variant}: {runs[variant][-1]}", file=sys.stderr, flush=True)
    return runs
