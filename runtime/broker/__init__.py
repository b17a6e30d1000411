"""Kafka plumbing shared by the Spark source/sink, the runtime and ``sana produce``.

Everything here talks to the broker with kafka-python and manual partition
assignment (no consumer groups: joins are slow on the embedded broker).
"""
