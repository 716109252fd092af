#!/usr/bin/env bash
# make test's pytest runs. The integration tests run one at a time: they share one broker, one PostgreSQL
# and one registry, and inject faults whose timing another test's load would move. The unit tests share
# nothing; they run beside them on every core at the lowest priority (nice 19), so they take only the CPU
# the integration tests leave idle, and their report follows the integration tests'.
set -uo pipefail
cd "$(dirname "$0")/.."
unit_dir=$(mktemp -d)
nice -n 19 .venv/bin/pytest tests/unit -n auto --basetemp "$unit_dir/tmp" >"$unit_dir/report" 2>&1 &
unit=$!
trap 'kill "$unit" 2>/dev/null; rm -rf "$unit_dir"' EXIT
.venv/bin/pytest tests/integration
integration_status=$?
wait "$unit"
unit_status=$?
echo "==== the unit tests, run beside the integration tests ===="
cat "$unit_dir/report"
if [ "$integration_status" -ne 0 ]; then exit "$integration_status"; fi
exit "$unit_status"
