"""The one SparkSession of a Sana process, configured for many small streaming queries."""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

log = logging.getLogger("sana.runtime.spark")

_LOCK = threading.Lock()

# Small shuffles (a 2-core machine runs several queries), UTC everywhere, Arrow
# for the driver-side keyed operators, FAIR scheduling so one busy fragment
# does not starve the others, no UI.
#
# No filter is pushed below a select. Pushing a filter through a projection
# substitutes the projection's expressions for the columns it reads, so
# through a chain of k selects that each read their input column n times the
# condition grows as n^k: four of the OPMW workload's pi stages (n = 25) made
# one statement's optimizer run out of the driver's heap, which stops every
# query of the process. Sana's sources push no filter into their scan, so the
# rule saves little here. (PushDownPredicates is the combined rule;
# PushPredicateThroughNonJoin also runs on its own in a later batch.)
NO_PUSHDOWN_THROUGH_SELECTS = ",".join(f"org.apache.spark.sql.catalyst.optimizer.{rule}" for rule in (
    "PushDownPredicates", "PushPredicateThroughNonJoin"))
# Spark keeps the classes it generated for 100 distinct pieces of code by
# default, least recently used first out. The queries of a service with a few
# dozen dataflows generate more than that every batch round, so every batch
# generated, compiled and loaded its classes again (35 OPMW queries alone:
# about 10 classes loaded and unloaded per second, 1.16 cores against 0.95
# with this cache). The classes live in the JVM's metaspace, a few KB each.
CODEGEN_CACHE_ENTRIES = "4096"
# That cache finds a piece of code by its text, and by default the text names
# its whole-stage codegen stage by number (GeneratedIteratorForCodegenStage7).
# Stages are numbered in plan order, so a change that adds or removes a
# branch of a hosting query's statement renumbers every stage after it, and
# Spark compiled those branches again, as new classes the JIT then compiles
# from the start, though their code was the same: a change cost the tasks it
# did not touch. Without the number in the class name, an unchanged branch
# finds its classes (tests/runtime/test_codegen_cache.py; docs/runtime.md,
# "What a change costs the rest").
CODEGEN_ID_IN_CLASS_NAME = "false"
# Spark's default driver heap is 1 GiB. In local mode the executors run in the
# driver's JVM too, and 35 OPMW queries alone kept G1 busy at that size: a
# young collection every 1.6 s, mostly for humongous allocations, 0.08 cores
# of GC threads. With 2 GiB: every 4-5 s, 0.035 cores; the service 0.54 ->
# 0.49 cores alone, 0.36 -> 0.33 shared (docs/reuse.md, "The driver's heap").
# It takes effect only when the session starts the JVM (not under spark-submit,
# whose --driver-memory decides); the Helm chart sets the same.
DRIVER_MEMORY = "2g"
# Each micro-batch writes two checkpoint files (its offsets, then its commit),
# each to a temporary name then renamed. Spark's default manager renames
# through Hadoop's FileContext, whose local implementation resolves links by
# running `readlink` in a new process, three to four times per rename: the
# demo's 4 queries spawned 18 processes a second from the driver's JVM, 12-18 %
# of a demo batch's CPU, which no process list shows (docs/runtime.md, "What a
# micro-batch costs"). The FileSystem-based manager renames with one
# rename(2), atomic on a local or mounted POSIX filesystem, which is where
# Sana keeps checkpoints (SANA_CHECKPOINT_DIR is a path).
CHECKPOINT_FILE_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
DEFAULT_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    "spark.scheduler.mode": "FAIR",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.stopTimeout": "30s",
    "spark.sql.adaptive.enabled": "false",
    "spark.python.worker.reuse": "true",
    "spark.sql.streaming.minBatchesToRetain": "20",
    "spark.driver.extraJavaOptions": "-Dlog4j2.level=warn",
    "spark.sql.optimizer.excludedRules": NO_PUSHDOWN_THROUGH_SELECTS,
    "spark.sql.codegen.cache.maxEntries": CODEGEN_CACHE_ENTRIES,
    "spark.sql.codegen.useIdInClassName": CODEGEN_ID_IN_CLASS_NAME,
    "spark.driver.memory": DRIVER_MEMORY,
    "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_FILE_MANAGER,
}


# A batch longer than its trigger interval is logged at WARN every time: expected under load.
QUIET_LOGGERS = (
    "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor",
    "org.apache.spark.sql.execution.streaming.ProcessingTimeExecutor",
)
# PySpark logs every failed SQL expression with its whole stack (about 150 lines of JSON) when the error reaches
# Python; the fragment query finds the task at fault and reports it in one line (runtime.quarantine).
QUIET_PYTHON_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def _quiet(session: SparkSession, loggers: tuple[str, ...]) -> None:
    for name in QUIET_PYTHON_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    try:
        jvm = session.sparkContext._jvm
        level = jvm.org.apache.logging.log4j.Level.ERROR
        for name in loggers:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)
    except Exception as error:  # logging configuration is cosmetic
        log.debug("could not quiet Spark loggers: %s", error)


# A key of a Java properties line ends at its first unescaped blank, "=" or ":".
_PROPERTY_KEY = re.compile(r"^((?:[^\\\s=:]|\\.)+)")


def property_keys(text: str) -> set[str]:
    """The keys a Java properties file (spark-defaults.conf) sets.

    >>> sorted(property_keys("# comment\\n\\nspark.a 1\\n  spark.b=2\\nspark.c: x y\\n! also a comment\\n"))
    ['spark.a', 'spark.b', 'spark.c']
    """
    keys = set()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = _PROPERTY_KEY.match(line)
        if match:
            keys.add(match.group(1).replace("\\", ""))
    return keys


def defaults_file(environ: Mapping[str, str] = os.environ) -> Path:
    """The spark-defaults.conf spark-submit reads when PySpark starts the driver JVM."""
    if environ.get("SPARK_CONF_DIR"):
        return Path(environ["SPARK_CONF_DIR"]) / "spark-defaults.conf"
    if environ.get("SPARK_HOME"):
        return Path(environ["SPARK_HOME"]) / "conf" / "spark-defaults.conf"
    import pyspark

    return Path(pyspark.__file__).parent / "conf" / "spark-defaults.conf"


def session_conf(conf: Mapping[str, str] | None = None, operator_keys: set[str] | frozenset[str] = frozenset()) -> dict[str, str]:
    """The properties Sana sets on the session: its defaults, less those the operator set, then ``conf``.

    A property set on the builder wins over spark-defaults.conf, so a default
    of Sana's would silently replace the operator's value (the chart's
    ``spark.conf`` writes that file).

    >>> session_conf({"spark.x": "1"}, {"spark.sql.shuffle.partitions"})["spark.x"]
    '1'
    >>> "spark.sql.shuffle.partitions" in session_conf({}, {"spark.sql.shuffle.partitions"})
    False
    """
    chosen = {key: value for key, value in DEFAULT_CONF.items() if key not in operator_keys}
    chosen.update(conf or {})
    return chosen


def spark_session(master: str, app_name: str = "sana", conf: dict[str, str] | None = None) -> SparkSession:
    """Get (or create) the process's SparkSession and register the ``sana_kafka`` source on it.

    Properties in spark-defaults.conf (``SPARK_CONF_DIR``) win over
    :data:`DEFAULT_CONF`; ``conf`` wins over both.
    """
    from runtime.spark.kafka_source import SanaKafka

    logging.getLogger("py4j").setLevel(logging.WARNING)  # py4j logs every callback at INFO
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    path = defaults_file()
    try:
        operator_keys = property_keys(path.read_text())
    except OSError:  # no such file: Sana's defaults apply
        operator_keys = set()
    overridden = sorted(operator_keys & DEFAULT_CONF.keys())
    if overridden:
        log.info("%s sets %s: Sana's defaults for them are not applied", path, ", ".join(overridden))
    with _LOCK:
        builder = SparkSession.builder.master(master).appName(app_name)
        for key, value in session_conf(conf, operator_keys).items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("WARN")
        _quiet(session, QUIET_LOGGERS)
        session.dataSource.register(SanaKafka)
    return session
