"""An operator's spark-defaults.conf wins over Sana's own Spark defaults (runtime/spark/session.py).

The chart writes its ``spark.conf`` values to spark-defaults.conf; a property
set on the session builder would silently replace them. The session is
started in a child process: a process has one SparkSession, and the driver
JVM reads the file only when it starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.spark.session import DEFAULT_CONF, defaults_file, property_keys, session_conf

pytestmark = [pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
READ_BACK = """
import json
from runtime.spark.session import spark_session
spark = spark_session("local[1]")
keys = ["spark.sql.shuffle.partitions", "spark.sql.session.timeZone", "spark.sana.marker"]
values = {key: spark.conf.get(key, None) for key in keys}
values["heap"] = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory()
print(json.dumps(values))
spark.stop()
"""


def test_operator_properties_win_over_sana_defaults(tmp_path):
    (tmp_path / "spark-defaults.conf").write_text(
        "# written by an operator\nspark.sql.shuffle.partitions 3\nspark.sana.marker=yes\n")
    env = {**os.environ, "SPARK_CONF_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", READ_BACK], env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    values = json.loads(done.stdout.strip().splitlines()[-1])
    assert values.pop("heap") > 1.5 * 2**30, "Sana's 2g driver heap, not Spark's 1g (the JVM's max is a little less)"
    assert values == {
        "spark.sql.shuffle.partitions": "3",  # the operator's, not Sana's "2"
        "spark.sql.session.timeZone": "UTC",  # Sana's default where the operator set nothing
        "spark.sana.marker": "yes",
    }


def test_conf_given_in_code_wins_over_both():
    chosen = session_conf({"spark.sql.shuffle.partitions": "5"}, {"spark.sql.shuffle.partitions"})
    assert chosen["spark.sql.shuffle.partitions"] == "5"
    assert {key: value for key, value in chosen.items() if key != "spark.sql.shuffle.partitions"} == {
        key: value for key, value in DEFAULT_CONF.items() if key != "spark.sql.shuffle.partitions"}


def test_defaults_file_follows_spark_submit():
    assert defaults_file({"SPARK_CONF_DIR": "/etc/spark", "SPARK_HOME": "/opt/spark"}) == Path("/etc/spark/spark-defaults.conf")
    assert defaults_file({"SPARK_HOME": "/opt/spark"}) == Path("/opt/spark/conf/spark-defaults.conf")


def test_property_keys_read_escapes_and_separators():
    assert property_keys("a\\ b=1\nc:2\n   \n#d 3\ne\tf\n") == {"a b", "c", "e"}


CHECKPOINTED_RUNS = """
import json, pathlib, sys
from runtime.spark.session import spark_session
spark = spark_session("local[1]")
inbox, checkpoint = sys.argv[1], sys.argv[2]
committed = []
for run in range(2):
    pathlib.Path(inbox, f"part-{run}.json").write_text("".join(json.dumps({"x": i}) + "\\n" for i in range(3)))
    query = (spark.readStream.schema("x long").option("maxFilesPerTrigger", 1).json(inbox)
             .writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    committed.append(sorted(int(p.name) for p in pathlib.Path(checkpoint, "commits").iterdir() if p.name.isdigit()))
print(json.dumps({"manager": spark.conf.get("spark.sql.streaming.checkpointFileManagerClass"), "committed": committed}))
spark.stop()
"""


def test_checkpoints_are_written_without_a_process_per_rename(tmp_path):
    """Spark's default checkpoint manager ran `readlink` in a new process for every checkpoint rename (several per
    micro-batch, from the driver's JVM); Sana's renames in-process, and a query still restarts from its checkpoint."""
    shims = tmp_path / "bin"
    shims.mkdir()
    calls = tmp_path / "readlink-calls"
    real = subprocess.run(["sh", "-c", "command -v readlink"], capture_output=True, text=True).stdout.strip()
    (shims / "readlink").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {real} "$@"\n')
    (shims / "readlink").chmod(0o755)
    (tmp_path / "inbox").mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{shims}:{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "-c", CHECKPOINTED_RUNS, str(tmp_path / "inbox"), str(tmp_path / "checkpoint")],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["committed"] == [[0], [0, 1]], "the second run continues from the first's checkpoint"
    renamed = [line for line in (calls.read_text().splitlines() if calls.exists() else []) if "checkpoint" in line]
    assert renamed == [], f"checkpoint renames ran readlink: {renamed[:3]}"
    assert result["manager"].endswith("FileSystemBasedCheckpointFileManager")
