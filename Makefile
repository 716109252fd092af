# The two commands of the README: `make example` and `make test`.
.PHONY: setup example test lint unit bench clean

setup:
	./scripts/setup.sh

example: setup
	./scripts/run-example.sh

lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

unit: setup
	.venv/bin/pytest tests/unit

test: lint
	.venv/bin/pytest

clean:
	rm -rf .venv .pytest_cache .mypy_cache .ruff_cache build *.egg-info
