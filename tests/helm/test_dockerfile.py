"""The manager image's Dockerfile, read statically (no Docker engine here).

The parser follows the Dockerfile reference: a trailing backslash continues an
instruction, lines starting with # are comments (also inside a continuation),
and JSON arrays are the exec form.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from dataclasses import dataclass

import pytest
import yaml

from tests.helm.chart_fixtures import CHART_DIR, REPO

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
# `sana serve` checks access as `sana up` does (api/launcher.py check_access) before uvicorn serves api.app:app.
SERVE = ["sana", "serve", "--host", "0.0.0.0", "--port", "8000"]


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    arguments: str

    def exec_form(self) -> list[str]:
        value = json.loads(self.arguments)
        assert isinstance(value, list), f"line {self.line}: {self.keyword} is not in exec (JSON array) form"
        return value


def parse_dockerfile(text: str) -> list[Instruction]:
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        keyword, _, arguments = " ".join(part for part in pending if part).partition(" ")
        instructions.append(Instruction(start, keyword.upper(), arguments.strip()))
        pending = []
    assert not pending, "the Dockerfile ends inside a continued instruction"
    return instructions


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text())


def _all(instructions: list[Instruction], keyword: str) -> list[Instruction]:
    return [i for i in instructions if i.keyword == keyword]


def _env(instructions: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in _all(instructions, "ENV"):
        for pair in shlex.split(instruction.arguments):
            key, _, value = pair.partition("=")
            env[key] = value
    return env


def test_parser_joins_continuations_and_skips_comments():
    parsed = parse_dockerfile("# c\nFROM a\nRUN x \\\n  # inner comment\n  && y\n\nCMD [\"z\"]\n")
    assert parsed == [Instruction(2, "FROM", "a"), Instruction(3, "RUN", "x && y"), Instruction(7, "CMD", '["z"]')]


def test_base_image_is_python_3_11_slim_on_bookworm(instructions):
    assert instructions[0].keyword == "FROM"
    [base] = _all(instructions, "FROM")
    assert base.arguments == "python:3.11-slim-bookworm"


def test_java_17_runtime_comes_from_debian(instructions):
    runs = " ".join(i.arguments for i in _all(instructions, "RUN"))
    assert re.search(r"apt-get install -y --no-install-recommends [^&]*\bopenjdk-17-jre-headless\b", runs)
    assert "rm -rf /var/lib/apt/lists/*" in runs
    assert _env(instructions)["JAVA_HOME"] == "/usr/lib/jvm/java-17"


def test_project_is_installed_with_pip_from_its_sources(instructions):
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    copied = {
        path.rstrip("/")
        for copy in _all(instructions, "COPY")
        for path in shlex.split(copy.arguments)[:-1]
    }
    packages = {pattern.rstrip("*") for pattern in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages <= copied, f"packages not copied into the image: {sorted(packages - copied)}"
    assert {"pyproject.toml", pyproject["project"]["readme"]} <= copied
    for path in copied:
        assert (REPO / path).exists(), f"COPY {path}: no such file in the repository"
    assert any(re.search(r"\bpip install \.(\s|$)", run.arguments) for run in _all(instructions, "RUN"))


def test_runs_as_a_non_root_user_matching_the_chart(instructions):
    users = _all(instructions, "USER")
    assert users, "the image has no USER: it would run as root"
    user = users[-1].arguments.split(":")[0]
    assert user not in {"root", "0"}
    assert all(run.line < users[-1].line for run in _all(instructions, "RUN")), "a RUN after USER would need root"
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert int(user) == values["manager"]["podSecurityContext"]["runAsUser"]


def test_exposes_the_api_and_starts_sana_serve(instructions):
    assert [e.arguments for e in _all(instructions, "EXPOSE")] == ["8000"]
    assert _all(instructions, "CMD")[-1].exec_form() == SERVE
    assert _all(instructions, "ENTRYPOINT")[-1].exec_form() == ["/usr/bin/tini", "--"]
    env = _env(instructions)
    assert env["SANA_API_HOST"] == "0.0.0.0"
    assert env["SANA_API_PORT"] == "8000"


def test_spark_home_is_the_installed_pyspark(instructions):
    spark_home = _env(instructions)["SPARK_HOME"]
    assert spark_home == "/usr/local/lib/python3.11/site-packages/pyspark"
    assert any(spark_home + "/bin/spark-submit" in run.arguments for run in _all(instructions, "RUN"))


def test_writable_paths_match_the_chart_settings(instructions):
    env = _env(instructions)
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert env["SANA_CHECKPOINT_DIR"] == values["checkpoints"]["dir"]
    assert env["SANA_RUN_DIR"] == values["runDir"]


def test_dockerignore_keeps_the_context_small_without_dropping_sources(instructions):
    patterns = [
        line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
    for must_ignore in (".git", ".venv", "tests", ".sana", "**/__pycache__"):
        assert must_ignore in patterns
    for copy in _all(instructions, "COPY"):
        for path in shlex.split(copy.arguments)[:-1]:
            path = path.rstrip("/")
            ignored = [p for p in patterns if fnmatch.fnmatch(path, p)]
            assert not ignored, f"COPY {path} is excluded by .dockerignore {ignored}"


def test_chart_runs_the_image_command_with_the_settings_expanded(instructions, render_chart):
    rendered = render_chart({})
    env = {name: item.get("value") for name, item in rendered.manager_env().items()}
    args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg) for arg in rendered.manager_container()["args"]]
    assert "command" not in rendered.manager_container(), "the chart must keep the image's ENTRYPOINT (tini)"
    assert args == _all(instructions, "CMD")[-1].exec_form()


def test_the_image_command_refuses_to_listen_beyond_loopback_without_tokens(instructions, monkeypatch, capsys):
    """The image's CMD is the `sana` script's `serve`, whose access check is `sana up`'s: no tokens, no 0.0.0.0."""
    from api import cli

    command = _all(instructions, "CMD")[-1].exec_form()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"][command[0]] == "api.cli:main"
    monkeypatch.delenv("SANA_TOKENS_FILE", raising=False)  # as in the image unless one is given
    assert cli.main(command[1:]) == 1
    assert ("sana serve: error: no SANA_TOKENS_FILE: single-user mode listens on loopback only, not 0.0.0.0"
            in capsys.readouterr().err)
