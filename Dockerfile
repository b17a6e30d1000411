# syntax=docker/dockerfile:1
#
# The Sana manager image: the REST API, the admin inspector and the Spark
# driver in one process (`sana serve`, uvicorn serving api.app:app). With Spark
# on Kubernetes the same image also runs the executors (see helm/sana).
#
#   docker build -t sana:0.4.0 .
#   docker run --rm -p 8000:8000 -e SANA_REDIS_URL=redis://host:6379/0 \
#     -e SANA_KAFKA_BOOTSTRAP=host:9092 -e SANA_TOKENS_FILE=/etc/sana/tokens.json \
#     -v "$PWD/tokens.json:/etc/sana/tokens.json:ro" sana:0.4.0
#
# The container listens on every address, so it needs a tokens file (README,
# "Principals and tokens"): without SANA_TOKENS_FILE `sana serve` refuses to
# start, as `sana up` refuses to listen beyond loopback in single-user mode.
#
# Debian bookworm: its openjdk-17 is the Java that Spark 4 runs on.
FROM python:3.11-slim-bookworm

LABEL org.opencontainers.image.title="sana" \
      org.opencontainers.image.description="Sana manager: shared streaming dataflows on Spark and Kafka"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Java 17 for Spark; tini as PID 1 so the JVM's children are reaped and signals
# reach the API. (man1 must exist for the JRE's update-alternatives on slim images.)
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/java-17

# An unprivileged user with a fixed uid (the Helm chart's runAsUser).
RUN groupadd --system --gid 10001 sana \
    && useradd --system --uid 10001 --gid sana --home-dir /var/lib/sana --no-create-home \
       --shell /usr/sbin/nologin sana

# The project, installed with its pinned dependency ranges (pyspark brings Spark's jars).
WORKDIR /opt/sana/src
COPY pyproject.toml README.md ./
COPY sana/ sana/
COPY wan/ wan/
COPY planning/ planning/
COPY manager/ manager/
COPY optimizer/ optimizer/
COPY scheduler/ scheduler/
COPY runtime/ runtime/
COPY wan_sim/ wan_sim/
COPY api/ api/
RUN pip install . \
    && cd / && rm -rf /opt/sana/src \
    && python -c "import api.app, pyspark" \
    && test -x /usr/local/lib/python3.11/site-packages/pyspark/bin/spark-submit

# SANA_* defaults for a container: listen on every address, state under /var/lib/sana.
ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    HOME=/var/lib/sana \
    SANA_API_HOST=0.0.0.0 \
    SANA_API_PORT=8000 \
    SANA_CHECKPOINT_DIR=/var/lib/sana/checkpoints \
    SANA_RUN_DIR=/var/lib/sana/run

RUN mkdir -p /var/lib/sana/checkpoints /var/lib/sana/run \
    && chown -R 10001:10001 /var/lib/sana
WORKDIR /var/lib/sana
USER 10001:10001

EXPOSE 8000
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["sana", "serve", "--host", "0.0.0.0", "--port", "8000"]
