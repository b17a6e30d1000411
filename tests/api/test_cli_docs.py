"""Every `sana` subcommand the parser registers is in the README's command table and in docs/architecture.md's
"The command line", so neither can drift from api/cli.py again."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from api.cli import main

ROOT = Path(__file__).resolve().parents[2]


def registered(capsys) -> set[str]:
    """The subcommands `sana --help` offers (its usage line's choices)."""
    with pytest.raises(SystemExit):
        main(["--help"])
    choices = re.search(r"\{([a-z,-]+)\}", capsys.readouterr().out)
    assert choices, "sana --help shows no subcommands"
    return set(choices.group(1).split(","))


def test_the_readme_command_table_names_every_subcommand(capsys):
    readme = (ROOT / "README.md").read_text()
    listed = set(re.findall(r"^\| `sana ([a-z-]+)", readme, re.MULTILINE))
    commands = registered(capsys)
    assert {"submit", "up", "wan-sim"} <= commands
    assert commands - listed == set(), "add these to the README's table of `sana` commands"


def test_the_architecture_page_names_every_subcommand(capsys):
    page = (ROOT / "docs" / "architecture.md").read_text()
    line = re.search(r"\*\*The command line\*\*: `sana ([^`]+)`", page)
    assert line, "docs/architecture.md lost its command line entry"
    listed = {name.strip() for name in line.group(1).split("|")}
    assert registered(capsys) - listed == set(), "add these to docs/architecture.md, 'The command line'"
