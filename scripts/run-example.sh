#!/usr/bin/env bash
# The README's first command: run the main example end to end against a local Kafka.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m examples.payments.run "$@"
