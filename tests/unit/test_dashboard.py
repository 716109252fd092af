"""The Grafana dashboard asks only for metrics and labels the runtime really serves to Prometheus, and
docs/operations.md shows the very PromQL it runs: a renamed metric or an edited panel fails here, not
as an empty graph in production."""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from opentelemetry.metrics import NoOpMeter
from prometheus_client.parser import text_string_to_metric_families

from runtime.config.telemetry import TelemetryConfig
from runtime.counters import Counters
from runtime.telemetry import RuntimeMetrics, Telemetry

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "kafka-actor-runtime.json"
DOCS = ROOT / "docs" / "operations.md"
PREFIX = "kafka_actor_"
DATASOURCE = "${DS_PROMETHEUS}"
# Prometheus adds these to every series it scrapes; the runtime does not export them itself.
SCRAPE_LABELS = frozenset({"instance", "job"})

STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
SELECTOR = re.compile(r"\{([^{}]*)\}")
MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
RANGE = re.compile(r"\[[^\[\]]*\]")
NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.*),\s*(?P<label>[A-Za-z_][A-Za-z0-9_]*)\s*\)$")
LEGEND_LABEL = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


@dataclass(frozen=True)
class Query:
    panel: str
    legend: str
    expr: str


@dataclass(frozen=True)
class PromQL:
    """What one expression names: metrics, labels its selectors match on, labels it groups by."""

    metrics: frozenset[str]
    matched: frozenset[str]
    grouped: frozenset[str]


def parse(expr: str) -> PromQL:
    """Regular expressions suffice for the dashboard's PromQL: strings go first (a label value may hold
    anything), then selectors' and groupings' label lists, so that what is left names only metrics
    and functions."""
    text = STRING.sub('""', expr)
    matched = {label for selector in SELECTOR.findall(text) for label in MATCHER.findall(selector)}
    grouped = {label.strip() for labels in GROUPING.findall(text) for label in labels.split(",") if label.strip()}
    text = RANGE.sub(" ", GROUPING.sub(" ", SELECTOR.sub(" ", text)))
    metrics = {name for name in NAME.findall(text) if name.startswith(PREFIX)}
    return PromQL(frozenset(metrics), frozenset(matched), frozenset(grouped))


def test_parse_tells_metric_names_from_label_names() -> None:
    parsed = parse(
        "histogram_quantile(0.99, sum by (le, kafka_actor_processor) (rate(kafka_actor_x_bucket"
        '{kafka_actor_app_id=~"$a", kafka_actor_worker!="kafka_actor_y"}[$__rate_interval])))'
        " / on(kafka_actor_task) kafka_actor_z"
    )
    assert parsed.metrics == {"kafka_actor_x_bucket", "kafka_actor_z"}
    assert parsed.matched == {"kafka_actor_app_id", "kafka_actor_worker"}
    assert parsed.grouped == {"le", "kafka_actor_processor", "kafka_actor_task"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def every_counter_set() -> Counters:
    """Counters with every field above zero and a processor's own count, so every counter has a series."""
    counters = Counters()
    for field in dataclasses.fields(Counters):
        if isinstance(getattr(counters, field.name), int | float):
            setattr(counters, field.name, 1)
    counters.count("enrich", "late_records", 2)
    return counters


def register_everything(metrics: RuntimeMetrics) -> None:
    """A callback of each kind and a value in each histogram, as a worker with all its parts running has."""
    metrics.register_counters(every_counter_set())
    metrics.register_consumer_lag(lambda: {("payments", 0): 5})
    metrics.register_queue_depth(lambda: {"0_0": 3})
    metrics.register_in_flight(lambda: {"0_0": (40, 0.8)})
    metrics.register_paused_partitions(lambda: 1)
    metrics.register_restore(lambda: {("app-store-changelog", 0): (10, 5)})
    metrics.register_standby_lag(lambda: {("app-store-changelog", 1): 4})
    metrics.register_global_store_offsets(lambda: {("rates", 0): (3, 7)})
    metrics.register_readiness(lambda: (True, False))
    metrics.register_rocksdb_memory(lambda: (30_000_000, 64 * 1024 * 1024))
    metrics.record_processing(0.3, "enrich")
    metrics.record_key_wait(12.0, "enrich")
    metrics.record_commit(12.0, transactional=True)


@pytest.fixture(scope="module")
def families() -> dict[str, dict[str, frozenset[str]]]:
    """{family: {sample name: its label names}} of the runtime's metrics, as a worker serves them: through
    `Telemetry` with the Prometheus exporter, scraped over HTTP."""
    port = free_port()
    config = TelemetryConfig.model_validate({"metrics": {"exporter": "prometheus", "host": "127.0.0.1", "port": port}})
    telemetry = Telemetry(config, "app", worker=1)
    try:
        register_everything(telemetry.metrics)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        telemetry.shutdown()
    found: dict[str, dict[str, frozenset[str]]] = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith(PREFIX):
            samples = found.setdefault(family.name, {})
            for sample in family.samples:
                samples[sample.name] = samples.get(sample.name, frozenset()) | frozenset(sample.labels)
    return found


@pytest.fixture(scope="module")
def exported(families: dict[str, dict[str, frozenset[str]]]) -> dict[str, frozenset[str]]:
    """{metric name as PromQL sees it (with _total, _bucket, ...): the labels of its series}."""
    return {name: labels for samples in families.values() for name, labels in samples.items()}


def load_dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def panels(container: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside rows (collapsed rows keep theirs in `panels`) included."""
    for panel in container.get("panels", []):
        yield panel
        yield from panels(panel)


def dashboard_queries() -> list[Query]:
    return [
        Query(panel["title"], target.get("legendFormat", ""), target["expr"])
        for panel in panels(load_dashboard())
        for target in panel.get("targets", [])
    ]


def dashboard_variables() -> list[tuple[str, str]]:
    """(name, query) of the query variables."""
    variables = load_dashboard()["templating"]["list"]
    return [(variable["name"], variable["definition"]) for variable in variables if variable["type"] == "query"]


def variable_label(query: str) -> tuple[PromQL, str]:
    """The selector of a `label_values(selector, label)` query, parsed, and the label."""
    found = LABEL_VALUES.match(query)
    assert found is not None, f"not a label_values(metric, label) query: {query}"
    return parse(found["selector"]), found["label"]


def test_every_instrument_of_the_runtime_shows_up_in_the_exposition(
    families: dict[str, dict[str, frozenset[str]]],
) -> None:
    """Else a metric the fixture failed to produce would pass for one the runtime does not export."""
    spy = mock.Mock(wraps=NoOpMeter("spy"))
    RuntimeMetrics(spy)
    created = [(call[0], call.args[0]) for call in spy.method_calls if call[0].startswith("create_")]
    instruments = {name for _, name in created}
    assert len(families) == len(instruments), (sorted(families), sorted(instruments))
    histograms = [name for name, samples in families.items() if any(s.endswith("_bucket") for s in samples)]
    assert len(histograms) == sum(kind == "create_histogram" for kind, _ in created)
    for name in histograms:
        assert {f"{name}_bucket", f"{name}_sum", f"{name}_count"} <= set(families[name])


def test_the_dashboard_names_only_metrics_the_runtime_exports(exported: dict[str, frozenset[str]]) -> None:
    named = [(query.panel, query.expr, parse(query.expr).metrics) for query in dashboard_queries()]
    named += [(f"variable {name}", query, variable_label(query)[0].metrics) for name, query in dashboard_variables()]
    assert named
    for where, expr, names in named:
        assert names, f"{where}: no {PREFIX}* metric in {expr}"
        unknown = sorted(names - exported.keys())
        assert not unknown, f"{where}: {unknown} not exported; exported are {sorted(exported)}"


def test_every_panel_filters_on_labels_its_series_have(exported: dict[str, frozenset[str]]) -> None:
    for query in dashboard_queries():
        parsed = parse(query.expr)
        for metric in parsed.metrics:
            assert metric in exported, f"{query.panel}: {metric} not exported"
            missing = sorted((parsed.matched | parsed.grouped) - exported[metric] - SCRAPE_LABELS)
            assert not missing, f"{query.panel}: {metric} has no label {missing}"
        # A label the aggregation drops would show as an empty legend.
        visible = parsed.grouped or frozenset().union(*(exported[metric] for metric in parsed.metrics)) | SCRAPE_LABELS
        missing = sorted(set(LEGEND_LABEL.findall(query.legend)) - visible)
        assert not missing, f"{query.panel}: legend {query.legend!r} shows {missing}, which the query drops"


def test_the_variables_are_labels_of_every_series_and_every_panel_filters_on_them(
    exported: dict[str, frozenset[str]],
) -> None:
    variables = dashboard_variables()
    assert {name for name, _ in variables} == {"app_id", "worker"}
    for name, query in variables:
        selector, label = variable_label(query)
        without = sorted(metric for metric, labels in exported.items() if label not in labels)
        assert not without, f"variable {name}: series of {without} have no label {label}"
        for metric in selector.metrics:
            assert selector.matched <= exported[metric], f"variable {name}: {query}"
        for panel_query in dashboard_queries():
            selectors = SELECTOR.findall(panel_query.expr)
            assert selectors, f"{panel_query.panel}: {panel_query.expr} filters on nothing"
            for selector_text in selectors:
                assert f'{label}=~"${name}"' in selector_text, f"{panel_query.panel}: {panel_query.expr}"


def test_the_dashboard_imports_as_it_is() -> None:
    """No inputs to fill in: the data source is a variable that every panel and query uses."""
    dashboard = load_dashboard()
    assert dashboard["id"] is None and dashboard["uid"] and "__inputs" not in dashboard
    assert dashboard["schemaVersion"] >= 39
    datasources = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert [(v["name"], v["query"]) for v in datasources] == [("DS_PROMETHEUS", "prometheus")]
    ids = [panel["id"] for panel in panels(dashboard)]
    assert len(ids) == len(set(ids))
    for panel in panels(dashboard):
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == DATASOURCE, panel["title"]
            assert panel["targets"], panel["title"]
            assert all(target["datasource"]["uid"] == DATASOURCE for target in panel["targets"]), panel["title"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["datasource"]["uid"] == DATASOURCE
            assert variable["query"]["query"] == variable["definition"]


def docs_section() -> str:
    text = DOCS.read_text()
    start = text.index("\n## Dashboard\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def table_rows(section: str) -> Iterator[list[str]]:
    """The cells of each table row but headers and rules, code spans unwrapped and `\\|` unescaped."""
    for raw in section.splitlines():
        line = raw.strip()
        if not line.startswith("|") or set(line) <= set("|- :"):
            continue
        cells = [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line[1:-1])]
        if cells[0] in ("Panel", "Variable"):
            continue
        yield [cell[1:-1] if len(cell) > 1 and cell[0] == cell[-1] == "`" else cell for cell in cells]


def test_the_docs_show_the_promql_of_every_panel() -> None:
    rows = list(table_rows(docs_section()))
    documented = [Query(*row) for row in rows if len(row) == 3]
    assert documented == dashboard_queries()
    assert [tuple(row) for row in rows if len(row) == 2] == dashboard_variables()
    assert len(rows) == len(documented) + len(dashboard_variables())
