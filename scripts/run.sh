#!/usr/bin/env bash
# Set everything up and run Sana on its embedded defaults: `sana up`.
# Extra arguments go to `sana up` (for example --dry-run or --port 8080).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec .venv/bin/sana up "$@"
