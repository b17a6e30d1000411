"""The data plane: operators, the Kafka source and sink for Spark, fragment queries.

Operator *declarations* (config model, ports, output schema) live in
:mod:`runtime.operators` and import no Spark, so the manager's validator and the
Spark builders share one schema propagation: what validation accepts is what runs.
"""
