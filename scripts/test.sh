#!/usr/bin/env bash
# Set everything up and run the whole test suite against the real services:
# Redis at SANA_REDIS_URL (default 127.0.0.1:6379), the embedded Kafka-protocol
# broker (started by the tests), Spark in local mode.
# Extra arguments go to pytest (for example -m "not slow" or -k merge).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
# The inspector's browser tests drive Debian's Chromium (a browser download does not work here).
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "test: installing Debian's chromium for the browser tests"
        (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium) >/tmp/sana-apt.log 2>&1 \
            || { echo "test: apt-get install chromium failed; see /tmp/sana-apt.log" >&2; exit 1; }
    else
        echo "test: the browser tests need Chromium at /usr/bin/chromium (Debian: sudo apt-get install chromium)" >&2
        exit 1
    fi
fi
export SANA_REDIS_URL=${SANA_REDIS_URL:-redis://127.0.0.1:6379/0}
if ! .venv/bin/python -c "import redis, os; redis.Redis.from_url(os.environ['SANA_REDIS_URL'], socket_connect_timeout=2).ping()" 2>/dev/null; then
    echo "test: no Redis answers at $SANA_REDIS_URL; start one (redis-server --port 6379) or set SANA_REDIS_URL" >&2
    exit 1
fi
exec .venv/bin/python -m pytest "$@"
