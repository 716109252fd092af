"""Sources that are not Kafka topics: what the runtime ships into Kafka from elsewhere."""
