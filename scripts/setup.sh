#!/usr/bin/env bash
# Create .venv (Python 3.11) and install Sana with its test dependencies.
# Sourced by scripts/run.sh and scripts/test.sh; safe to run again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    echo "setup: Sana needs Python 3.11 (found $("$PYTHON" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
    exit 1
fi
if ! command -v java >/dev/null 2>&1; then
    echo "setup: Java 17 is missing; Spark needs it. Install it (Debian: apt-get install openjdk-17-jre-headless) and run again." >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv"
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.sana-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "setup: installing Sana and its dependencies into .venv (first time: a few minutes, pyspark is large)"
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e '.[test]'
    touch "$stamp"
fi
