"""The Spark data plane: the Kafka data source, operator builders, keyed state, fragment queries."""
