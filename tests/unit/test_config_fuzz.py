"""Whatever the file holds, loading it gives a valid app or a ConfigError: never another exception."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.config import AppConfig, ConfigError, load_app
from tests.unit.test_config_cli import VALID

# Pieces of YAML syntax, so random text reaches the parser's odd corners rather than only plain scalars.
TOKENS = ["[", "]", "{", "}", ",", ":", ": ", "- ", "? ", "\n", "  ", "&a ", "*a", "&b ", "*b", "<<: ", "!!binary ",
          "!!set ", "!!python/object:os.system ", "!!str ", "!!int ", "'", '"', "|\n", ">-\n", "#", "---\n", "...\n",
          "%YAML 1.1\n", "app_id", "processors", "topics", "params", "kafka", "consumer", "x", "1", "-1", ".inf",
          "~", "null", "2024-01-01", "0x1F", "\t", "\\", "\ufeff", "\x85", "é", "${HOME}", "${NOPE}"]  # fmt: skip

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20), st.binary(max_size=10))
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.one_of(st.text(max_size=10), st.integers()), children,
                                                        max_size=4)
    ),
    max_leaves=20,
)  # fmt: skip
PLACES = [("app_id",), ("kafka",), ("kafka", "consumer"), ("kafka", "client"), ("topics",), ("topics", "orders"),
          ("topics", "orders", "partitions"), ("processors",), ("processors", 0), ("processors", 0, "params"),
          ("processors", 0, "stores"), ("queue",), ("errors",), ("snapshots",), ("telemetry",), ("global_stores",),
          ("transaction_timeout_ms",), ("state_dir",)]  # fmt: skip


def load_bytes(data: bytes) -> AppConfig | None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "app.yaml"
        path.write_bytes(data)
        try:
            return load_app(path)
        except ConfigError as error:
            assert str(error), "a ConfigError must say what is wrong"
            return None


def replace_field(place: tuple[str | int, ...], value: Any) -> bytes:
    """VALID with the field at `place` replaced by `value`."""
    app = copy.deepcopy(VALID)
    parent: Any = app
    for key in place[:-1]:
        parent = parent[key]
    parent[place[-1]] = value
    return yaml.safe_dump(app, allow_unicode=True).encode()


DOCUMENTS = st.one_of(
    st.lists(st.sampled_from(TOKENS), max_size=60).map(lambda tokens: "".join(tokens).encode()),
    st.binary(max_size=200),
    st.builds(replace_field, st.sampled_from(PLACES), VALUES),
    st.builds(lambda levels, opener: f"app_id: x\nprocessors: {opener * levels}\n".encode(),
              st.integers(min_value=1, max_value=3000), st.sampled_from(["[", "{a: ", "- ", "? "])),
)  # fmt: skip


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENTS)
def test_any_file_loads_as_an_app_or_a_config_error(data: bytes) -> None:
    """Random syntax, random bytes, a valid app with one field replaced by anything, deep nesting."""
    load_bytes(data)
