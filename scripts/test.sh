#!/usr/bin/env bash
# make test's pytest runs. The integration tests run one at a time: they share one broker, one PostgreSQL
# and one registry, and inject faults whose timing another test's load would move. The unit tests share
# nothing; they run beside them on every core at the lowest priority (nice 19), so they take only the CPU
# the integration tests leave idle, and their report follows the integration tests'.
set -uo pipefail
cd "$(dirname "$0")/.."
unit_dir=$(mktemp -d)
# The S3-compatible object store the snapshot tests keep checkpoints in is built from crates.io on first use
# (runtime/devs3/server.py, three minutes of CPU, cached beside Kafka's jars): on a fresh machine the build
# runs beside the tests, as the unit tests do, and the object store's tests wait for it.
nice -n 19 .venv/bin/python -c "from runtime.devs3.server import server_binary; server_binary()" \
    >"$unit_dir/s3-build" 2>&1 &
build=$!
nice -n 19 .venv/bin/pytest tests/unit -n auto --basetemp "$unit_dir/tmp" >"$unit_dir/report" 2>&1 &
unit=$!
trap 'kill "$unit" "$build" 2>/dev/null; rm -rf "$unit_dir"' EXIT
.venv/bin/pytest tests/integration
integration_status=$?
wait "$unit"
unit_status=$?
echo "==== the unit tests, run beside the integration tests ===="
cat "$unit_dir/report"
if [ "$integration_status" -ne 0 ]; then exit "$integration_status"; fi
exit "$unit_status"
