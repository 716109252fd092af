#!/usr/bin/env bash
# Everything a fresh machine needs: Java + Maven for the local Kafka broker, PostgreSQL, and a virtualenv
# with this package and its development tools. Safe to run again: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "installing Java and Maven (Debian packages default-jdk-headless maven)"
        apt-get update -qq && apt-get install -y -qq default-jdk-headless maven >/dev/null
    else
        echo "error: Java 17+ and Maven are needed for the local Kafka broker;" >&2
        echo "       install them (Debian/Ubuntu: sudo apt-get install default-jdk-headless maven)" >&2
        exit 1
    fi
fi

# PostgreSQL's server, for the database sink's tests and examples (a throwaway cluster each, on 127.0.0.1).
if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "installing PostgreSQL (Debian package postgresql)"
        apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
    else
        echo "error: PostgreSQL's server is needed for the database tests and examples;" >&2
        echo "       install it (Debian/Ubuntu: sudo apt-get install postgresql)" >&2
        exit 1
    fi
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e ".[dev,spark]"
    touch "$stamp"
fi
# Resolve Kafka's jars and the Spark jobs' S3A connector now (from Maven Central, cached outside the
# repository), and build the schema registry the tests start (Apicurio Registry, from Maven Central too).
.venv/bin/python -c "from runtime.devkafka.jars import resolve_jars; resolve_jars()"
.venv/bin/python -c "from stores.spark.s3a_jars import s3a_jars; s3a_jars()"
.venv/bin/python -c "from tests.support.schema_registry import registry_app; registry_app()"
