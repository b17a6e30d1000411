"""The read and write path benchmarks end to end on a few records: each variant moves every record through a
real embedded broker, and the result file says so. (A rename once left read_path calling a method that does not
exist; nothing ran it until a session measured with it.)"""

from __future__ import annotations

import json

import pytest

from benchmarks import read_path, write_path

pytestmark = pytest.mark.kafka


def test_read_path_reads_every_record_with_each_client(tmp_path, capsys):
    out = tmp_path / "read.json"
    assert read_path.main(["--rows", "3000", "--rounds", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["variants"]) == set(read_path.VARIANTS)
    for variant, (run,) in result["runs"].items():
        assert run["records"] == 3000, variant
        assert run["arrow_batches"] >= 1 and run["records_per_s"] > 0, variant  # CPU: under a clock tick here
    assert "| librdkafka-values-only |" in capsys.readouterr().out


def test_write_path_writes_every_batch_with_each_client(tmp_path):
    out = tmp_path / "write.json"
    assert write_path.main(["--rows", "500", "--topics", "2", "--batches", "2", "--rounds", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["runs"]) == {"kafka-python", "librdkafka"}
    for variant, (run,) in result["runs"].items():
        assert run["records"] == 1000 and run["wall_us_per_record"] > 0, variant
