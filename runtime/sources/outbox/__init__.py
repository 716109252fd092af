"""The transactional outbox: rows a service wrote to a database table, in the same database transaction
as its business data, shipped to Kafka exactly once: `config.py` what an app's YAML says of
one, `poller.py` how it is shipped."""
