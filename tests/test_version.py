"""The version is written once (sana/__init__.py); the package, the API, the chart and the changelog agree."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import yaml

from sana import __version__

ROOT = Path(__file__).resolve().parents[1]


def test_the_installed_package_and_the_chart_carry_the_version():
    assert version("sana") == __version__
    chart = yaml.safe_load((ROOT / "helm" / "sana" / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__


def test_the_changelog_opens_with_the_version():
    readme = (ROOT / "README.md").read_text()
    changelog = readme[readme.index("## Changelog"):]
    newest = re.search(r"^- (\d+\.\d+\.\d+)", changelog, re.MULTILINE)
    assert newest and newest.group(1) == __version__


def test_the_api_reports_the_version():
    from api.app import create_app
    from sana.settings import Settings

    assert create_app(Settings(dry_run=True)).version == __version__
