# The two commands of the README: `make example` and `make test`.
.PHONY: setup example example-minutes example-sessions example-cdc example-enrichment example-merchants example-orders example-lookup example-acquirers-db example-replay test test-jaeger lint unit bench clean

setup:
	./scripts/setup.sh

example: setup
	./scripts/run-example.sh

# The windowed examples (examples/minute_totals/, examples/sessions/), each checked end to end.
example-minutes: setup
	.venv/bin/python -m examples.minute_totals.run

example-sessions: setup
	.venv/bin/python -m examples.sessions.run

# The merge join of CDC rows with their transactions (examples/cdc_merge/), checked end to end.
example-cdc: setup
	.venv/bin/python -m examples.cdc_merge.run

# Payments enriched with their account as of each payment's time (examples/enrichment/), checked end to end.
example-enrichment: setup
	.venv/bin/python -m examples.enrichment.run

# Totals per merchant from payments keyed by account, through a repartition topic (examples/merchant_totals/).
example-merchants: setup
	.venv/bin/python -m examples.merchant_totals.run

# The outbox: orders written with their outbox rows in PostgreSQL, shipped to Kafka, totals written back (examples/orders/).
example-orders: setup
	.venv/bin/python -m examples.orders.run

# Orders enriched with their customer by PostgreSQL lookups, 200 in flight per task, each customer's in order.
example-lookup: setup
	.venv/bin/python -m examples.customer_lookup.run

# Reference data from a real database: the acquirers' reference table followed from PostgreSQL (examples/acquirers/).
example-acquirers-db: setup
	.venv/bin/python -m examples.acquirers.from_postgres

# Replay by key and time: five days of account activity replayed by key and time, by replay jobs through a kill -9, and made unique.
example-replay: setup
	.venv/bin/python -m examples.account_activity.run

lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

# The unit tests share nothing, so they run on every core (scripts/test.sh runs them beside the integration tests).
unit: setup
	.venv/bin/pytest tests/unit -n auto

test: lint
	./scripts/test.sh

# Spans exported over OTLP to a real Jaeger v2 (built once into ~/.cache/kafka-actor-runtime).
test-jaeger: setup
	./scripts/jaeger.sh
	.venv/bin/pytest -m jaeger

clean:
	rm -rf .venv .pytest_cache .mypy_cache .ruff_cache build *.egg-info
