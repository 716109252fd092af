"""The Aggregate processor's params, checked when the app is loaded: every mistake names its path in the
YAML, and `python -m runtime` exits 2 before it connects. Also the general mechanism under it: a
processor's `Params` model, and the stores its params need, which the YAML need not declare."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationInfo, field_validator

from processors import Context, Processor, Record
from runtime.config import ConfigError, parse_app
from tests.support.config_cli import GUARD_MARKER, UNREACHABLE, install_network_guard, run_cli, write_yaml

EXIT_CONFIG = 2

VALID: dict[str, Any] = {
    "app_id": "per-minute",
    "kafka": {"bootstrap_servers": UNREACHABLE},
    "topics": {"payments": {}, "totals": {}, "late-payments": {}},
    "processors": [
        {
            "name": "totals",
            "class": "processors.windows:Aggregate",
            "inputs": ["payments"],
            "outputs": ["totals", "late-payments"],
            "params": {
                "window": {"type": "tumbling", "size_ms": 60_000, "grace_ms": 5_000},
                "aggregation": {"type": "sum", "field": "amount_minor"},
                "group_by": ["account", "currency"],
                "output": "totals",
                "late_topic": "late-payments",
            },
        }
    ],
}

Edit = Callable[[dict[str, Any]], None]


def params(**changes: Any) -> Edit:
    """Set params (a value of None removes the param)."""

    def edit(app: dict[str, Any]) -> None:
        target = app["processors"][0]["params"]
        for name, value in changes.items():
            if value is None:
                target.pop(name, None)
            else:
                target[name] = value

    return edit


def window(**fields: Any) -> Edit:
    return lambda app: app["processors"][0]["params"]["window"].update(fields)


def aggregation(**fields: Any) -> Edit:
    def edit(app: dict[str, Any]) -> None:
        spec = app["processors"][0]["params"]["aggregation"]
        spec.update(fields)
        for name in [name for name, value in fields.items() if value is None]:
            del spec[name]

    return edit


AT = r"processors\[0\]\.params\."  # where every error below is


def count_window(*, keep_late_topic: bool = False, **fields: Any) -> Edit:
    """Count windows instead, without the late-records topic they have no use for unless kept."""

    def edit(app: dict[str, Any]) -> None:
        target = app["processors"][0]["params"]
        target["window"] = {"type": "count", **fields}
        if not keep_late_topic:
            del target["late_topic"]

    return edit


def session_of(aggregator: str) -> Edit:
    def edit(app: dict[str, Any]) -> None:
        window(type="session", size_ms=None, gap_ms=30_000)(app)
        aggregation(type=aggregator)(app)

    return edit


CASES = [
    (window(size_ms=0), r"window\.size_ms: Input should be greater than 0"),
    (window(size_ms=-60_000), r"window\.size_ms: Input should be greater than 0"),
    (window(grace_ms=-1), r"window\.grace_ms: Input should be greater than or equal to 0"),
    (
        window(type="hopping", advance_ms=90_000),
        r"window\.advance_ms: advance_ms \(90000\) must not exceed size_ms \(60000\)",
    ),
    (window(type="hopping", advance_ms=0), r"window\.advance_ms: Input should be greater than 0"),
    (window(type="hopping"), r"window\.advance_ms: hopping windows need advance_ms"),
    (window(type="cyclic"), r"window\.type: Input should be 'tumbling', 'hopping', 'sliding', 'session' or 'count'"),
    (window(type="session"), r"window\.size_ms: session windows take gap_ms \(and grace_ms\), not size_ms"),
    (window(type="sliding", size_ms=None), r"window\.time_difference_ms: sliding windows need time_difference_ms"),
    (window(sise_ms=1), r"window\.sise_ms: Extra inputs are not permitted"),
    (window(size=100), r"window\.size: only count windows take size, a number of records"),
    (count_window(), r"window\.size: count windows need size: how many records of a key each window holds"),
    (count_window(size=0), r"window\.size: Input should be greater than 0"),
    (count_window(size=3, step=4), r"window\.step: step \(4\) must not exceed size \(3\)"),
    (count_window(size=3, size_ms=100), r"window\.size_ms: count windows take size \(and step\), a number of records"),
    (
        count_window(size=3, grace_ms=0),
        r"window\.grace_ms: count windows take no grace_ms: a window closes",
    ),
    (count_window(size=3, keep_late_topic=True), r"late_topic: count windows have no late records"),
    (
        aggregation(type="median"),
        r"aggregation\.type: unknown aggregation 'median': expected count, sum, min, max, mean, first, last, list, "
        r"or a class as package\.module:Class",
    ),
    (aggregation(field=None), r"aggregation\.field: sum needs a field"),
    (aggregation(type="mean", field=None), r"aggregation\.field: mean needs a field"),
    (aggregation(type="count"), r"aggregation\.field: count counts records: it takes no field"),
    (aggregation(type="list"), r"aggregation\.max_items: list needs max_items"),
    (aggregation(max_items=3), r"aggregation\.max_items: only list takes max_items, not sum"),
    (
        aggregation(type="no_such_module:Median"),
        r"aggregation\.type: cannot import aggregator class 'no_such_module:Median': No module named 'no_such_module'",
    ),
    (
        aggregation(type="tests.support.aggregators:Median"),
        r"aggregation\.type: cannot import aggregator class .*has no attribute 'Median'",
    ),
    (aggregation(type="json:dumps"), r"aggregation\.type: .*not a class with initial\(\) and add\(aggregate, value\)"),
    (
        session_of("tests.support.aggregators:Unmergeable"),
        r"aggregation: 'tests\.support\.aggregators:Unmergeable' has no merge\(first, second\)",
    ),
    (
        params(output="elsewhere"),
        r"output: topic 'elsewhere' is not among the processor's outputs \['late-payments', 'totals'\]",
    ),
    (params(output=None), r"output: Field required"),
    (params(late_topic="payments"), r"late_topic: topic 'payments' is not among"),
    (params(emit="always"), r"emit: Input should be 'final' or 'updates'"),
    (params(group_by=[]), r"group_by: expected the name of a field .*, or a list of such"),
    (params(group_by={"account": 1}), r"group_by: expected the name of a field"),
    (params(store="per minute"), r"store: String should match pattern"),
    (params(window=None), r"window: Field required"),
    (params(windoe={}), r"windoe: Extra inputs are not permitted"),
]


@pytest.mark.parametrize(("edit", "expected"), CASES)
def test_a_mistake_in_the_params_names_its_field(edit: Edit, expected: str) -> None:
    app = copy.deepcopy(VALID)
    edit(app)
    with pytest.raises(ConfigError) as raised:
        parse_app(app)
    assert re.search(AT + expected, str(raised.value)), f"{expected!r} not in {raised.value}"


def test_the_store_the_params_need_is_declared_for_the_yaml() -> None:
    stores = parse_app(copy.deepcopy(VALID)).processors[0].stores
    assert list(stores) == ["totals"]  # named after the processor
    totals = stores["totals"]
    assert (totals.kind, totals.retention_ms, totals.backend) == ("window_by_time", 65_000, "rocksdb")

    app = copy.deepcopy(VALID)
    params(window={"type": "sliding", "time_difference_ms": 10_000})(app)
    assert parse_app(app).processors[0].stores["totals"].kind == "window", "sliding windows read a key's range"

    app = copy.deepcopy(VALID)
    params(store="sessions", window={"type": "session", "gap_ms": 30_000, "grace_ms": 1_000})(app)
    app["processors"][0]["stores"] = {"sessions": {"backend": "memory", "retention_ms": 600_000}}
    stores = parse_app(app).processors[0].stores
    assert (stores["sessions"].kind, stores["sessions"].retention_ms, stores["sessions"].backend) == (
        "session", 600_000, "memory",
    )  # fmt: skip


def test_count_windows_keep_each_keys_open_windows_in_a_key_value_store() -> None:
    app = copy.deepcopy(VALID)
    count_window(size=10, step=5)(app)
    totals = parse_app(app).processors[0].stores["totals"]
    assert (totals.kind, totals.retention_ms, totals.changelog) == ("key_value", None, True)


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        (
            {"kind": "session"},
            r"processors\[0\]\.stores: store 'totals': the params need a window_by_time store, not session",
        ),
        ({"retention_ms": 60_000}, r"processors\[0\]\.stores: store 'totals': retention_ms 60000 is below the 65000"),
        ({"backend": "disk"}, r"processors\[0\]\.stores\.totals\.backend: Input should be 'memory' or 'rocksdb'"),
    ],
)
def test_the_yaml_may_add_to_the_store_the_params_need_but_not_change_it(
    declared: dict[str, Any], expected: str
) -> None:
    app = copy.deepcopy(VALID)
    app["processors"][0]["stores"] = {"totals": declared}
    with pytest.raises(ConfigError, match=expected):
        parse_app(app)


class Threshold(Processor):
    """A user's processor with params of its own: validated at load, with the processor's outputs at hand."""

    class Params(BaseModel):
        limit: int
        alerts: str

        @field_validator("alerts")
        @classmethod
        def _an_output(cls, topic: str, info: ValidationInfo) -> str:
            if isinstance(info.context, Mapping) and topic not in info.context["outputs"]:
                raise ValueError(f"'{topic}' is not an output of processor '{info.context['name']}'")
            return topic

    @classmethod
    def stores_for(cls, params: Any, name: str) -> dict[str, dict[str, Any]]:
        return {f"{name}-seen": {"changelog": params.limit > 10}}

    def process(self, record: Record, ctx: Context) -> None:
        if record.value > self.Params.model_validate(ctx.params).limit:
            ctx.send("alerts", record.value)


def test_a_user_processor_declares_its_params_and_stores() -> None:
    app: dict[str, Any] = {
        "app_id": "alerts",
        "topics": {"readings": {}, "alerts": {}},
        "processors": [{"name": "check", "class": f"{__name__}:Threshold", "inputs": ["readings"],
                        "outputs": ["alerts"], "params": {"limit": 100, "alerts": "alerts"}}],
    }  # fmt: skip
    stores = parse_app(app).processors[0].stores
    seen = stores["check-seen"]
    assert (list(stores), seen.kind, seen.changelog) == (["check-seen"], "key_value", True)
    app["processors"][0]["params"] = {"limit": "many", "alerts": "alarms"}
    with pytest.raises(ConfigError) as raised:
        parse_app(app)
    assert str(raised.value).splitlines() == [
        "processors[0].params.limit: Input should be a valid integer, unable to parse string as an integer",
        "processors[0].params.alerts: 'alarms' is not an output of processor 'check'",
    ]


def test_the_command_exits_2_on_bad_window_params_before_it_connects(tmp_path: Path) -> None:
    app = copy.deepcopy(VALID)
    window(size_ms=0, grace_ms=-5)(app)
    aggregation(type="median")(app)
    path = write_yaml(tmp_path / "app.yaml", app)
    result = run_cli(path, install_network_guard(tmp_path / "guard"))
    assert GUARD_MARKER not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert result.returncode == EXIT_CONFIG, result.stderr
    assert result.stderr.startswith(f"error in {path}:\n"), result.stderr
    for field in ("window.size_ms", "window.grace_ms", "aggregation.type"):
        assert f"processors[0].params.{field}: " in result.stderr, result.stderr
