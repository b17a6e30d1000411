"""The reuse manager: dataflow model, signatures, merge/unmerge, durable state.

Pure parts (``validate``, ``signature``, ``merge``) import no Redis, Spark or
Kafka; ``store`` persists to Redis; ``service`` orchestrates a change as
plan -> deploy -> commit.
"""
