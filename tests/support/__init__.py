"""What the tests share: Kafka helpers, the apps and processors they run, fakes of client objects."""
