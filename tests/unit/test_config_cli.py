"""`python -m runtime app.yaml` on broken YAML: exit 2, no traceback, the field path and what was expected.

Every run has a guard that ends the process on any network connection, and KAFKA_BOOTSTRAP_SERVERS
points at a port nothing listens on: a config error must be reported before the runtime connects.
"""

from __future__ import annotations

import copy
import re
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.config import parse_app
from runtime.worker.supervisor import for_worker
from tests.support.config_cli import (
    GUARD_EXIT,
    GUARD_MARKER,
    UNREACHABLE,
    ForkingCli,
    install_network_guard,
    run_cli,
    write_yaml,
)

EXIT_CONFIG = 2

VALID: dict[str, Any] = {
    "app_id": "cli-check",
    "kafka": {"bootstrap_servers": UNREACHABLE},
    "topics": {
        "orders": {"partitions": 3, "key_serde": "str", "value_serde": "json"},
        "refunds": {"partitions": 3},
        "out": {"partitions": 3},
    },
    "processors": [
        {"name": "route", "class": "processors:Processor", "inputs": ["orders"], "outputs": ["out"]},
    ],
}

Edit = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Case:
    id: str
    edit: Edit | None = None  # applied to a copy of VALID
    text: str | None = None  # the file's text instead
    expected: tuple[str, ...] = ()  # regexes that must all match stderr


def processor(app: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = app["processors"][0]
    return found


def set_topic(name: str, **fields: Any) -> Edit:
    def edit(app: dict[str, Any]) -> None:
        app["topics"].setdefault(name, {}).update(fields)

    return edit


def set_processor(**fields: Any) -> Edit:
    return lambda app: processor(app).update(fields)


def set_top(**fields: Any) -> Edit:
    return lambda app: app.update(fields)


def remove(field: str) -> Edit:
    return lambda app: app.pop(field)


def both(first: Edit, second: Edit) -> Edit:
    def edit(app: dict[str, Any]) -> None:
        first(app)
        second(app)

    return edit


CASES = [
    Case("missing app_id", remove("app_id"), expected=(r"(?m)^\s*app_id: Field required$",)),
    Case("missing processors", remove("processors"), expected=(r"(?m)^\s*processors: Field required$",)),
    Case("empty processors", set_top(processors=[]), expected=(r"processors: List should have at least 1 item",)),
    Case(
        "missing processor inputs",
        lambda app: processor(app).pop("inputs"),
        expected=(r"processors\[0\]\.inputs: Field required",),
    ),
    Case(
        "commit interval not a number",
        set_top(commit_interval_ms="soon"),
        expected=(r"commit_interval_ms: Input should be a valid integer",),
    ),
    Case(
        "negative partitions",
        set_topic("orders", partitions=-1),
        expected=(r"topics\.orders\.partitions: Input should be greater than or equal to 1",),
    ),
    Case(
        "guarantee not one of the choices",
        set_top(guarantee="exactly_twice"),
        expected=(r"guarantee: Input should be 'at_most_once', 'at_least_once' or 'exactly_once'",),
    ),
    Case(
        "unknown processor class",
        set_processor(**{"class": "no.such:Thing"}),
        expected=(r"processors\[0\]\.class: cannot import processor class 'no\.such:Thing'",),
    ),
    Case(
        "processor class path without a class",
        set_processor(**{"class": "processors"}),
        expected=(r"processors\[0\]\.class: .*not an import path like 'package\.module:Name'",),
    ),
    Case(
        "class that is not a Processor",
        set_processor(**{"class": "processors.record:Record"}),
        expected=(r"processors\[0\]\.class: 'processors\.record:Record' is not a subclass of processors\.Processor",),
    ),
    Case(
        "function instead of a class",
        set_processor(**{"class": "json:dumps"}),
        expected=(r"processors\[0\]\.class: 'json:dumps' is not a subclass of processors\.Processor",),
    ),
    Case(
        "unknown serde",
        set_topic("orders", value_serde="yaml"),
        expected=(
            r"topics\.orders\.value_serde: unknown serde 'yaml': the built-in serdes are bytes, str, json, msgpack,",
        ),
    ),
    Case(
        "serde class that does not exist",
        set_topic("out", key_serde="processors.serdes:NoSuchSerde"),
        expected=(r"topics\.out\.key_serde: unknown serde 'processors\.serdes:NoSuchSerde'.*has no attribute",),
    ),
    Case(
        "serde class without serialize and deserialize",
        set_topic("out", key_serde="collections:OrderedDict"),
        expected=(r"topics\.out\.key_serde: unknown serde .*serialize\(obj\) and deserialize\(data\)",),
    ),
    Case(
        "input not declared under topics",
        set_processor(inputs=["orders", "nowhere"]),
        expected=(r"processors\[0\]\.inputs: topic 'nowhere' is not declared under topics",),
    ),
    Case(
        "output not declared under topics",
        set_processor(outputs=["elsewhere"]),
        expected=(r"processors\[0\]\.outputs: topic 'elsewhere' is not declared under topics",),
    ),
    Case(
        "inputs not co-partitioned",
        both(set_topic("refunds", partitions=6), set_processor(inputs=["orders", "refunds"])),
        expected=(r"processors\[0\]\.inputs: .*co-partitioned", r"'orders': 3", r"'refunds': 6"),
    ),
    Case(
        "resume_at equal to pause_at",
        set_top(queue={"pause_at": 500, "resume_at": 500}),
        expected=(r"queue: resume_at \(500\) must be below pause_at \(500\)",),
    ),
    Case(
        "resume_at above pause_at",
        set_top(queue={"pause_at": 100, "resume_at": 700}),
        expected=(r"queue: resume_at \(700\) must be below pause_at \(100\)",),
    ),
    Case(
        "typo in a top-level field",
        set_top(comit_interval_ms=200),
        expected=(r"(?m)^\s*comit_interval_ms: Extra inputs are not permitted$",),
    ),
    Case(
        "typo in a nested field",
        set_topic("orders", partitons=3),
        expected=(r"topics\.orders\.partitons: Extra inputs are not permitted",),
    ),
    Case(
        "invalid topic name",
        set_topic("bad topic!", partitions=1),
        expected=(r"topics: 'bad topic!' is not a valid Kafka topic name",),
    ),
    Case(
        "unset environment variable",
        lambda app: processor(app).update(params={"token": "${NOPE_VAR}"}),
        expected=(r"processors\[0\]\.params\.token: environment variable NOPE_VAR is not set",),
    ),
    Case(
        "unset environment variable in kafka options",
        set_top(
            kafka={
                "bootstrap_servers": UNREACHABLE,
                "security": {
                    "protocol": "SASL_SSL",
                    "sasl": {"mechanism": "PLAIN", "username": "u", "password": "${NOPE_SECRET}"},
                },
            }
        ),
        expected=(r"kafka\.security\.sasl\.password: environment variable NOPE_SECRET is not set",),
    ),
    Case(
        "telemetry exporter not one of the choices",
        set_top(telemetry={"traces": {"exporter": "jaeger"}}),
        expected=(r"telemetry\.traces\.exporter: Input should be 'otlp', 'console' or 'none'",),
    ),
    Case(
        "sampling ratio above 1",
        set_top(telemetry={"sampling_ratio": 1.5}),
        expected=(r"telemetry\.sampling_ratio: Input should be less than or equal to 1",),
    ),
    Case(
        "typo in the telemetry section",
        set_top(telemetry={"metrics": {"exporter": "prometheus", "prot": 9464}}),
        expected=(r"telemetry\.metrics\.prot: Extra inputs are not permitted",),
    ),
    Case(
        "invalid YAML syntax",
        text="app_id: broken\ntopics:\n  orders: {partitions: 3\nprocessors: []\n",
        expected=(r"is not valid YAML", r"line \d+, column \d+"),
    ),
    Case(
        "tab indentation",
        text="app_id: broken\ntopics:\n\torders: {}\n",
        expected=(r"is not valid YAML", r"line 3"),
    ),
    Case(
        "snapshot location that is a URL of no object store",
        set_top(snapshots={"location": "gs://bucket/snapshots"}),
        expected=(r"snapshots\.location: 'gs://bucket/snapshots' is a URL; give a directory, or s3://bucket/prefix",),
    ),
    Case(
        "snapshot location in a bucket whose name S3 refuses",
        set_top(snapshots={"location": "s3://My_Bucket/snapshots"}),
        expected=(r"snapshots\.location: 's3://My_Bucket/snapshots' names no valid bucket",),
    ),
    Case(
        "snapshots without a location",
        set_top(snapshots={"path": "/data/snapshots"}),
        expected=(r"snapshots\.location: Field required", r"snapshots\.path: Extra inputs are not permitted"),
    ),
    Case(
        "snapshots of a memory store",
        set_processor(stores={"totals": {"backend": "memory", "snapshots": {"location": "/data/snapshots"}}}),
        expected=(r"processors\[0\]\.stores\.totals: snapshots are ingested into RocksDB stores with a changelog",),
    ),
    Case(
        "window store without a retention",
        set_processor(stores={"per-minute": {"kind": "window"}}),
        expected=(r"processors\[0\]\.stores\.per-minute\.retention_ms: a window store needs retention_ms",),
    ),
    Case(
        "session store without a retention",
        set_processor(stores={"visits": {"kind": "session", "backend": "memory"}}),
        expected=(r"processors\[0\]\.stores\.visits\.retention_ms: a session store needs retention_ms",),
    ),
    Case(
        "retention of a key-value store",
        set_processor(stores={"totals": {"retention_ms": 60000}}),
        expected=(r"processors\[0\]\.stores\.totals\.retention_ms: a key_value store keeps its keys until deleted",),
    ),
    Case(
        "retention that is not positive",
        set_processor(stores={"per-minute": {"kind": "window", "retention_ms": 0}}),
        expected=(r"processors\[0\]\.stores\.per-minute\.retention_ms: Input should be greater than 0",),
    ),
    Case(
        "unknown store kind",
        set_processor(stores={"per-minute": {"kind": "windowed", "retention_ms": 60000}}),
        expected=(
            r"processors\[0\]\.stores\.per-minute\.kind: "
            r"Input should be 'key_value', 'window', 'window_by_time' or 'session'",
        ),
    ),
    Case(
        "timestamp extractor that cannot be imported",
        set_topic("orders", timestamp={"extractor": "no.such.module:ts"}),
        expected=(r"topics\.orders\.timestamp\.extractor: cannot import timestamp extractor 'no\.such\.module:ts'",),
    ),
    Case(
        "timestamp extractor that is not a function",
        set_topic("orders", timestamp={"extractor": "processors.context:__doc__"}),
        expected=(
            r"topics\.orders\.timestamp\.extractor: 'processors\.context:__doc__' is not a function of a record",
        ),
    ),
    Case(
        "timestamp with both a field and an extractor",
        set_topic("orders", timestamp={"field": "at", "extractor": "time:time"}),
        expected=(r"topics\.orders\.timestamp: give exactly one of `field` .* or `extractor`",),
    ),
    Case(
        "timestamp with neither",
        set_topic("orders", timestamp={}),
        expected=(r"topics\.orders\.timestamp: give exactly one of",),
    ),
    Case(
        "timestamp field with an empty step",
        set_topic("orders", timestamp={"field": "event..time"}),
        expected=(r"topics\.orders\.timestamp\.field: 'event\.\.time' is not a field name or a dotted path",),
    ),
    Case(
        "negative max_task_idle_ms",
        set_top(max_task_idle_ms=-1),
        expected=(r"max_task_idle_ms: Input should be greater than or equal to 0",),
    ),
    Case("empty file", text="", expected=(r"\(top level\): expected a mapping with app_id, topics and processors",)),
    Case("a list, not a mapping", text="- app_id: x\n", expected=(r"\(top level\): expected a mapping",)),
]


def set_kafka(section: str, **options: Any) -> Edit:
    return lambda app: app["kafka"].setdefault(section, {}).update(options)


# Option maps are checked against aiokafka's constructors; numbers against what Kafka accepts.
CLIENT_CASES = [
    Case(
        "misspelt consumer option",
        set_kafka("consumer", fetch_max_byte=1024),
        expected=(
            r"kafka\.consumer\.fetch_max_byte: not an option of aiokafka's consumer \(did you mean fetch_max_bytes\?\)",
        ),
    ),
    Case(
        "producer option under client",
        set_kafka("client", linger_ms=5),
        expected=(
            r"kafka\.client\.linger_ms: not an option of every aiokafka client \(an option of the producer: set "
            r"it under kafka\.producer\)",
        ),
    ),
    Case(
        "option of no client",
        set_kafka("producer", colour="blue"),
        expected=(r"(?m)kafka\.producer\.colour: not an option of aiokafka's producer$",),
    ),
    Case(
        "string where the client takes an integer",
        set_kafka("producer", linger_ms="5"),
        expected=(r"kafka\.producer\.linger_ms: expected an integer, got a string",),
    ),
    Case(
        "integer where the client takes true or false",
        set_kafka("consumer", check_crcs=1),
        expected=(r"kafka\.consumer\.check_crcs: expected true or false, got an integer",),
    ),
    Case(
        "client number beyond Kafka's 32 bits",
        set_kafka("consumer", session_timeout_ms=2**31),
        expected=(r"kafka\.consumer\.session_timeout_ms: 2147483648 is outside 0\.\.2147483647",),
    ),
    Case(
        "auto commit set by the runtime",
        set_kafka("consumer", enable_auto_commit=True),
        expected=(r"kafka\.consumer\.enable_auto_commit: set by the runtime",),
    ),
    Case(
        "transactional id set by the runtime",
        set_kafka("producer", transactional_id="mine"),
        expected=(r"kafka\.producer\.transactional_id: set by the runtime, .*set guarantee",),
    ),
    Case(
        "a security option among the client options",
        set_kafka("client", ssl_context="default"),
        expected=(
            r"kafka\.client\.ssl_context: security is set for every client in one place: set kafka\.security\.tls",
        ),
    ),
    Case(
        "a TLS file option aiokafka does not have",
        set_kafka("client", ssl_cafile="/ca.pem"),
        expected=(
            r"kafka\.client\.ssl_cafile: not an option of every aiokafka client; "
            r"TLS and SASL are set under kafka\.security",
        ),
    ),
    Case(
        "SASL_SSL named among the client options",
        set_kafka("client", security_protocol="SASL_SSL"),
        expected=(r"kafka\.client\.security_protocol: .*set kafka\.security\.protocol instead",),
    ),
    Case(
        "every bad option at once",
        both(set_kafka("consumer", fetch_max_byte=1), set_kafka("producer", acks_all=True)),
        expected=(r"kafka\.consumer\.fetch_max_byte: ", r"kafka\.producer\.acks_all: "),
    ),
    Case(
        "a value aiokafka's producer refuses",
        set_kafka("producer", acks=2),
        expected=(r"kafka\.client and kafka\.producer: aiokafka's producer refuses them: Invalid ACKS parameter",),
    ),
    Case(
        "acks without idempotence",
        set_kafka("producer", acks=1),
        expected=(r"kafka\.producer: .*acks=1 not supported if enable_idempotence=True",),
    ),
    Case(
        "an unknown compression codec",
        set_kafka("producer", compression_type="brotli"),
        expected=(r"kafka\.producer: aiokafka's producer refuses them: Invalid compression type",),
    ),
    Case(
        "SASL without credentials",
        set_top(kafka={"security": {"protocol": "SASL_PLAINTEXT", "sasl": {"mechanism": "SCRAM-SHA-512"}}}),
        expected=(r"kafka\.security\.sasl: .*SCRAM-SHA-512 needs username and password",),
    ),
    Case(
        "SASL settings on a protocol without SASL",
        set_top(
            kafka={"security": {"protocol": "SSL", "sasl": {"mechanism": "PLAIN", "username": "u", "password": "p"}}}
        ),
        expected=(r"kafka\.security: .*sasl is for the protocols SASL_PLAINTEXT and SASL_SSL, not SSL",),
    ),
    Case(
        "a CA file that does not exist",
        set_top(kafka={"security": {"protocol": "SSL", "tls": {"ca_file": "/no/such/ca.pem"}}}),
        expected=(r"kafka\.security\.tls\.ca_file: Path does not point to a file",),
    ),
    Case(
        "OAUTHBEARER without its endpoint",
        set_top(kafka={"security": {"protocol": "SASL_SSL", "sasl": {"mechanism": "OAUTHBEARER"}}}),
        expected=(r"kafka\.security\.sasl: .*OAUTHBEARER takes its tokens from oauth",),
    ),
    Case(
        "max_poll_records that is not a number",
        set_kafka("consumer", max_poll_records="many"),
        expected=(
            r"kafka\.client and kafka\.consumer: aiokafka's consumer refuses them: `max_poll_records` should be",
        ),
    ),
    Case(
        "partitions beyond int32",
        set_topic("orders", partitions=2147483648),
        expected=(r"topics\.orders\.partitions: Input should be less than or equal to 10000",),
    ),
    Case(
        "replication factor beyond int16",
        set_topic("out", replication_factor=40000),
        expected=(r"topics\.out\.replication_factor: 40000 is above 32767",),
    ),
    Case(
        "transaction timeout above the broker's maximum",
        set_top(guarantee="exactly_once", transaction_timeout_ms=900001),
        expected=(
            r"transaction_timeout_ms: 900001 is above 900000, the broker's default transaction\.max\.timeout\.ms",
        ),
    ),
    Case(
        "commit interval beyond Kafka's 32 bits",
        set_top(commit_interval_ms=2**31),
        expected=(r"commit_interval_ms: Input should be less than or equal to 2147483647",),
    ),
]

# Names that become paths under state_dir or topic names.
NAME_CASES = [
    Case(
        "app_id '..'", set_top(app_id=".."), expected=(r"app_id: '\.\.' would put the app's stores outside state_dir",)
    ),
    Case("app_id '.'", set_top(app_id="."), expected=(r"app_id: '\.' would put the app's stores outside state_dir",)),
    Case("app_id like an internal topic", set_top(app_id="__app"), expected=(r"app_id: '__app' starts with '__'",)),
    Case(
        "a state_dir folder name longer than a file system takes",
        set_top(state_dir="/tmp/" + "s" * 300),
        expected=(r"state_dir: the folder name 's{20}\.\.\.' is 300 bytes long: at most 255 fit",),
    ),
    Case(
        "internal topic as an output",
        both(set_topic("__consumer_offsets", partitions=50), set_processor(outputs=["__consumer_offsets"])),
        expected=(r"topics: '__consumer_offsets' starts with '__', which names Kafka's internal topics",),
    ),
    Case(
        "internal topic as an input",
        both(set_topic("__transaction_state"), set_processor(inputs=["__transaction_state"])),
        expected=(r"topics: '__transaction_state' starts with '__'",),
    ),
    Case(
        "internal topic for dead letters",
        set_top(errors={"processing": "dead_letter", "dead_letter_topic": "__consumer_offsets"}),
        expected=(r"errors\.dead_letter_topic: '__consumer_offsets' starts with '__'",),
    ),
    Case(
        "internal topic for a global store",
        set_top(global_stores={"offsets": {"topic": "__consumer_offsets"}}),
        expected=(r"global_stores\.offsets\.topic: '__consumer_offsets' starts with '__'",),
    ),
    Case(
        "topic named '..'", set_topic("..", partitions=1), expected=(r"topics: '\.\.' is not a valid Kafka topic name",)
    ),
    Case(
        "store named like the global stores' directory",
        set_processor(stores={"global": {}}),
        expected=(r"processors\[0\]\.stores: store name 'global' is reserved",),
    ),
    Case(
        "changelog topic name too long",
        both(set_top(app_id="a" * 240), set_processor(stores={"totals": {}})),
        expected=(r"processors\[0\]\.stores\.totals: the changelog topic 'a{240}-totals-changelog' is not a valid",),
    ),
]

# Credentials never reach a message, whichever way they were written.
SECRET = "hunter2-swordfish"
SECRET_CASES = [
    Case(
        "credentials in the bootstrap servers",
        set_top(kafka={"bootstrap_servers": f"payments:{SECRET}@{UNREACHABLE}"}),
        expected=(r"kafka\.bootstrap_servers: '\*\*\*@127\.0\.0\.1:1' holds credentials",),
    ),
    Case(
        "credentials in a snapshot URL",
        set_top(snapshots={"location": f"s3://AKIAEXAMPLE:{SECRET}@bucket/snapshots"}),
        expected=(
            r"snapshots\.location: 's3://\*\*\*@bucket/snapshots' holds credentials: give them in the environment",
        ),
    ),
    Case(
        "a password option that is echoed",
        both(set_kafka("client", sasl_plain_password=SECRET), set_top(snapshots={"location": f"gs://b/{SECRET}"})),
        expected=(r"snapshots\.location: 'gs://b/\*\*\*' is a URL",),
    ),
    Case(
        "a substituted variable that is echoed",
        set_top(snapshots={"location": "${SNAPSHOT_URL}"}),
        expected=(r"snapshots\.location: '\*\*\*' is a URL",),
    ),
]


@pytest.fixture(scope="module")
def guard_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_network_guard(tmp_path_factory.mktemp("network-guard"))


@pytest.fixture(scope="module")
def cli(guard_dir: Path) -> Iterator[ForkingCli]:
    """Each case's run in a process of its own, forked from one that imported the runtime once."""
    with ForkingCli(guard_dir) as runner:
        yield runner


def assert_config_error(stderr: str, returncode: int, app: Path, expected: tuple[str, ...]) -> None:
    assert GUARD_MARKER not in stderr, f"the runtime connected before reporting the config error:\n{stderr}"
    assert "Traceback" not in stderr, stderr
    assert returncode == EXIT_CONFIG, stderr
    assert stderr.startswith(f"error in {app}:\n"), stderr
    for pattern in expected:
        assert re.search(pattern, stderr), f"{pattern!r} not in:\n{stderr}"


def test_the_valid_app_is_valid_and_the_guard_stops_its_first_connection(guard_dir: Path, tmp_path: Path) -> None:
    """Each case differs from VALID in one way; the guard would catch a runtime that connects first."""
    parse_app(copy.deepcopy(VALID))
    result = run_cli(write_yaml(tmp_path / "app.yaml", VALID), guard_dir)
    assert result.returncode == GUARD_EXIT, result.stderr
    assert GUARD_MARKER in result.stderr


@pytest.mark.parametrize("case", CASES + CLIENT_CASES + NAME_CASES, ids=lambda case: case.id)
def test_config_error_is_reported_before_connecting(case: Case, cli: ForkingCli, tmp_path: Path) -> None:
    path = tmp_path / "app.yaml"
    if case.text is not None:
        path.write_text(case.text)
    else:
        app = copy.deepcopy(VALID)
        assert case.edit is not None
        case.edit(app)
        write_yaml(path, app)
    result = cli.run(path)
    assert_config_error(result.stderr, result.returncode, path, case.expected)


@pytest.mark.parametrize("case", SECRET_CASES, ids=lambda case: case.id)
def test_secrets_are_redacted_from_config_errors(
    case: Case, cli: ForkingCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SNAPSHOT_URL", f"gs://bucket/{SECRET}")
    app = copy.deepcopy(VALID)
    assert case.edit is not None
    case.edit(app)
    path = write_yaml(tmp_path / "app.yaml", app)
    result = cli.run(path)
    assert_config_error(result.stderr, result.returncode, path, case.expected)
    assert SECRET not in result.stderr


def test_missing_file(cli: ForkingCli, tmp_path: Path) -> None:
    path = tmp_path / "missing.yaml"
    result = cli.run(path)
    assert_config_error(result.stderr, result.returncode, path, (rf"cannot read {re.escape(str(path))}: No such file",))


def test_directory_instead_of_file(cli: ForkingCli, tmp_path: Path) -> None:
    result = cli.run(tmp_path)
    assert_config_error(result.stderr, result.returncode, tmp_path, (rf"cannot read {re.escape(str(tmp_path))}: ",))


def test_every_problem_is_reported_at_once(cli: ForkingCli, tmp_path: Path) -> None:
    app = copy.deepcopy(VALID)
    app["commit_interval_ms"] = "soon"
    app["topics"]["orders"]["partitions"] = 0
    processor(app)["class"] = "no.such:Thing"
    path = write_yaml(tmp_path / "app.yaml", app)
    result = cli.run(path)
    expected = (r"commit_interval_ms: ", r"topics\.orders\.partitions: ", r"processors\[0\]\.class: ")
    assert_config_error(result.stderr, result.returncode, path, expected)


BROKEN_MODULES = {
    "raises_at_import": 'raise RuntimeError("boom at import")\n',
    "bad_syntax": "def process(:\n",
}


@pytest.fixture
def broken_modules(tmp_path: Path) -> Path:
    directory = tmp_path / "user_code"
    directory.mkdir()
    for name, text in BROKEN_MODULES.items():
        (directory / f"{name}.py").write_text(text)
    return directory


@pytest.mark.parametrize("module", sorted(BROKEN_MODULES))
@pytest.mark.parametrize("field", ["processor class", "serde"])
def test_user_module_that_fails_to_import(
    module: str, field: str, cli: ForkingCli, broken_modules: Path, tmp_path: Path
) -> None:
    app = copy.deepcopy(VALID)
    if field == "processor class":
        processor(app)["class"] = f"{module}:Thing"
        expected = rf"processors\[0\]\.class: .*{module}"
    else:
        app["topics"]["out"]["value_serde"] = f"{module}:Thing"
        expected = rf"topics\.out\.value_serde: .*{module}"
    path = write_yaml(tmp_path / "app.yaml", app)
    result = cli.run(path, importable=broken_modules)
    assert_config_error(result.stderr, result.returncode, path, (expected,))


def test_numeric_topic_name_is_the_topic_of_that_name() -> None:
    app = copy.deepcopy(VALID)
    app["topics"][123] = {"partitions": 1}  # written unquoted, YAML reads an int: Kafka allows "123"
    config = parse_app(yaml.safe_load(yaml.safe_dump(app)))
    assert config.topics["123"].partitions == 1


def test_a_store_takes_its_own_snapshot_location_else_the_apps() -> None:
    app = copy.deepcopy(VALID)
    app["snapshots"] = {"location": "/mnt/snapshots"}
    processor(app)["stores"] = {
        "plain": {},
        "own": {"snapshots": {"location": "/mnt/other"}},
        "in-memory": {"backend": "memory"},
        "local-only": {"changelog": False},
    }
    config = parse_app(app)
    stores = config.processors[0].stores
    locations = {name: getattr(config.snapshots_for(spec), "location", None) for name, spec in stores.items()}
    assert locations == {"plain": Path("/mnt/snapshots"), "own": Path("/mnt/other"), "in-memory": None,
                         "local-only": None}  # fmt: skip


def test_telemetry_that_cannot_be_set_up_is_a_config_error(
    cli: ForkingCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
    app = copy.deepcopy(VALID)
    app["telemetry"] = {"traces": {"exporter": "otlp"}}
    path = write_yaml(tmp_path / "app.yaml", app)
    result = cli.run(path)
    assert_config_error(
        result.stderr, result.returncode, path, (r"telemetry: OTLP protocol 'carrier-pigeon' is not supported",)
    )


def test_a_prometheus_port_in_use_is_a_config_error(cli: ForkingCli, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        app = copy.deepcopy(VALID)
        app["telemetry"] = {"metrics": {"exporter": "prometheus", "host": "127.0.0.1", "port": port}}
        path = write_yaml(tmp_path / "app.yaml", app)
        result = cli.run(path)
    assert_config_error(
        result.stderr,
        result.returncode,
        path,
        (rf"telemetry: metrics.port: cannot serve Prometheus metrics on 127.0.0.1:{port} \(Address already in use\)",),
    )


def test_a_health_port_in_use_is_a_config_error(cli: ForkingCli, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = write_yaml(tmp_path / "app.yaml", {**VALID, "health": {"host": "127.0.0.1", "port": port}})
        result = cli.run(path)
    assert_config_error(
        result.stderr,
        result.returncode,
        path,
        (rf"health.port: cannot serve the health endpoints on 127.0.0.1:{port} \(Address already in use\)",),
    )


def test_each_of_several_workers_serves_prometheus_and_health_on_the_port_after_the_one_before() -> None:
    app = copy.deepcopy(VALID)
    app["telemetry"] = {"metrics": {"exporter": "prometheus", "port": 9500}}
    app["health"] = {"port": 8100}
    config = parse_app(app)
    assert [for_worker(config, index).telemetry.metrics.port for index in range(3)] == [9500, 9501, 9502]
    assert [for_worker(config, index).health.port for index in range(3)] == [8100, 8101, 8102]  # type: ignore[union-attr]
    assert for_worker(config, 2).telemetry.metrics.host == config.telemetry.metrics.host
    pushed = parse_app({**VALID, "telemetry": {"metrics": {"exporter": "otlp"}}})
    assert for_worker(pushed, 2) == pushed  # only a served endpoint needs a port of its own
