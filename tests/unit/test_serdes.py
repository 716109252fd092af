"""Serdes: built-ins round-trip, user classes load by import path, bad paths fail clearly."""

from __future__ import annotations

import json
import math
from typing import Any

import msgpack
import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from processors import Serde
from runtime.config import ConfigError, parse_app
from stores.serdes import (
    BUILTIN_SERDES,
    BytesSerde,
    JsonSerde,
    MsgpackSerde,
    StrSerde,
    UnknownSerde,
    import_object,
    resolve_serde,
)


class ReversedUtf8Serde:
    """A user serde: text stored reversed, so a round trip only works through this very class."""

    def serialize(self, obj: Any) -> bytes:
        return str(obj)[::-1].encode()

    def deserialize(self, data: bytes) -> Any:
        return data.decode()[::-1]


class HalfASerde:
    def serialize(self, obj: Any) -> bytes:
        return b""


class NeedsArguments:
    def __init__(self, charset: str) -> None:
        self.charset = charset

    def serialize(self, obj: Any) -> bytes:
        return str(obj).encode(self.charset)

    def deserialize(self, data: bytes) -> Any:
        return data.decode(self.charset)


NOT_A_CLASS = "just a string"

THIS_MODULE = __name__
USER_SERDE = f"{THIS_MODULE}:ReversedUtf8Serde"


def round_trip(serde: Serde, value: Any) -> Any:
    data = serde.serialize(value)
    assert isinstance(data, bytes)
    return serde.deserialize(data)


ROUND_TRIPS: list[tuple[str, Any]] = [
    ("bytes", b""),
    ("bytes", b"\x00\xff\x80 binary"),
    ("str", ""),
    ("str", "plain"),
    ("str", "héllo wörld ✓ 日本 🚀"),
    ("json", None),
    ("json", 0),
    ("json", -(2**70)),
    ("json", 3.25),
    ("json", "text ✓"),
    ("json", [1, "two", None, True, {"three": 3.0}]),
    ("json", {"id": "p-1", "amount": 1999, "tags": [], "nested": {"ok": False, "ratio": 0.5}}),
    ("msgpack", None),
    ("msgpack", 2**64 - 1),
    ("msgpack", -(2**63)),
    ("msgpack", 1.5),
    ("msgpack", "text ✓"),
    ("msgpack", b"\x00raw bytes\xff"),
    ("msgpack", [1, [2, [3, []]], {"k": b"v"}]),
    ("msgpack", {"id": "p-1", "amount": 1999, "blob": b"\x01\x02", "flags": [True, False, None]}),
    (USER_SERDE, "stressed"),
    (USER_SERDE, "héllo ✓"),
]


ROUND_TRIP_IDS = [f"{name.rsplit(':')[-1]}-{index}" for index, (name, _) in enumerate(ROUND_TRIPS)]


@pytest.mark.parametrize(("name", "value"), ROUND_TRIPS, ids=ROUND_TRIP_IDS)
def test_round_trip(name: str, value: Any) -> None:
    assert round_trip(resolve_serde(name), value) == value


def test_builtin_names() -> None:
    assert set(BUILTIN_SERDES) == {"bytes", "str", "json", "msgpack"}
    for name, cls in BUILTIN_SERDES.items():
        assert isinstance(resolve_serde(name), cls)
        assert isinstance(resolve_serde(name), Serde)


def test_encodings_are_the_usual_ones() -> None:
    """Other clients must be able to read what the runtime writes."""
    assert StrSerde().serialize("héllo") == "héllo".encode()
    assert JsonSerde().serialize({"a": [1, 2], "b": "é", 3: None}) == '{"a":[1,2],"b":"é","3":null}'.encode()
    assert json.loads(JsonSerde().serialize({"a": 1})) == {"a": 1}
    value = {"n": 1, "s": "x", "b": b"\x00"}
    assert MsgpackSerde().serialize(value) == msgpack.packb(value)
    assert MsgpackSerde().deserialize(msgpack.packb(value)) == value


def test_bytes_serde_accepts_bytes_like() -> None:
    serde = BytesSerde()
    assert serde.serialize(bytearray(b"abc")) == b"abc"
    assert serde.serialize(memoryview(b"abc")) == b"abc"
    assert type(serde.serialize(bytearray(b"abc"))) is bytes


def test_msgpack_serde_reuses_its_packer_safely() -> None:
    serde = MsgpackSerde()
    first = serde.serialize({"a": 1})
    second = serde.serialize([1, 2, 3])
    assert serde.deserialize(first) == {"a": 1}
    assert serde.deserialize(second) == [1, 2, 3]
    assert serde.serialize({"a": 1}) == first


def test_json_values_take_only_their_own_memory() -> None:
    """A store keeps many small values: none may hold on to a serializer's buffer (orjson's would
    keep kilobytes each, which `sys.getsizeof` does not show but the process's memory does)."""
    process = psutil.Process()
    before = process.memory_info().rss
    values = [JsonSerde().serialize("ACQ-NORTH") for _ in range(100_000)]
    assert values[0] == b'"ACQ-NORTH"'
    assert process.memory_info().rss - before < 50 * 2**20


def test_json_keeps_integers_beyond_64_bits_exact() -> None:
    big = {"id": 2**70 + 1, "small": -(2**63), "text": "12345678901234567890123"}
    assert JsonSerde().serialize(big) == json.dumps(big, separators=(",", ":")).encode()
    assert JsonSerde().deserialize(JsonSerde().serialize(big)) == big
    assert JsonSerde().deserialize(b"[18446744073709551616, 1.5]") == [2**64, 1.5]
    assert JsonSerde().deserialize(b'{"id": 18446744073709551616, "ok": true}') == {"id": 2**64, "ok": True}
    # A flat row with floats and integers beyond 64 bits: each read as it was written.
    assert JsonSerde().deserialize(b'{"amount": 1.5, "id": 18446744073709551616}') == {"amount": 1.5, "id": 2**64}
    assert JsonSerde().deserialize(b'{"amount": 1.5, "id": -9223372036854775809}') == {
        "amount": 1.5,
        "id": -(2**63) - 1,
    }
    assert JsonSerde().deserialize(b'{"amount": 1.5, "big": 1e19, "n": 7}') == {"amount": 1.5, "big": 1e19, "n": 7}
    assert JsonSerde().deserialize(b'{"row": {"id": -9223372036854775809}}') == {"row": {"id": -(2**63) - 1}}
    assert JsonSerde().deserialize(b'{"id": 7, "name": "x", "none": null}') == {"id": 7, "name": "x", "none": None}


def test_json_and_msgpack_turn_tuples_into_lists() -> None:
    assert round_trip(JsonSerde(), (1, 2)) == [1, 2]
    assert round_trip(MsgpackSerde(), (1, (2, 3))) == [1, [2, 3]]


def test_deserializing_garbage_raises() -> None:
    with pytest.raises(ValueError):
        JsonSerde().deserialize(b"{not json")
    for not_strict_json in (b"NaN", b'"\\ud800"', b"[1] x"):
        with pytest.raises(ValueError):
            JsonSerde().deserialize(not_strict_json)
    with pytest.raises(UnicodeDecodeError):
        StrSerde().deserialize(b"\xff\xfe\xfa")
    with pytest.raises(ValueError):
        MsgpackSerde().deserialize(b"\x92\x01")  # an array of 2 with only 1 item
    with pytest.raises(ValueError):
        MsgpackSerde().deserialize(b"\x01\x02")  # extra data after the first object


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=30,
)
msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=30,
)


@given(json_values)
def test_json_round_trips(value: Any) -> None:
    assert round_trip(JsonSerde(), value) == value


@given(msgpack_values)
def test_msgpack_round_trips(value: Any) -> None:
    assert round_trip(MsgpackSerde(), value) == value


@given(st.text())
def test_str_round_trips(value: str) -> None:
    assert round_trip(StrSerde(), value) == value


@given(st.binary())
def test_bytes_round_trips(value: bytes) -> None:
    assert round_trip(BytesSerde(), value) == value


def test_msgpack_keeps_infinities() -> None:
    assert round_trip(MsgpackSerde(), math.inf) == math.inf


def test_msgpack_round_trips_int_keys() -> None:
    assert round_trip(MsgpackSerde(), {1: "one", 2: "two"}) == {1: "one", 2: "two"}


def test_bytes_serde_rejects_an_int() -> None:
    with pytest.raises(TypeError):
        BytesSerde().serialize(3)


# User serdes by import path.


def test_user_serde_by_import_path() -> None:
    serde = resolve_serde(USER_SERDE)
    assert isinstance(serde, ReversedUtf8Serde)
    assert serde.serialize("abc") == b"cba"


def test_user_serde_by_dotted_path() -> None:
    assert isinstance(resolve_serde(f"{THIS_MODULE}.ReversedUtf8Serde"), ReversedUtf8Serde)


def test_each_resolve_makes_a_new_instance() -> None:
    assert resolve_serde(USER_SERDE) is not resolve_serde(USER_SERDE)


def test_user_serde_in_an_app() -> None:
    app = parse_app(
        {
            "app_id": "serdes",
            "topics": {"in": {"key_serde": USER_SERDE, "value_serde": "json"}},
            "processors": [{"name": "p", "class": "processors:Processor", "inputs": ["in"]}],
        }
    )
    assert app.topics["in"].key_serde == USER_SERDE


# Bad import paths.


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("no_such_module_xyz:Serde", "No module named 'no_such_module_xyz'"),
        ("no_such_package_xyz.codecs.Serde", "No module named 'no_such_package_xyz'"),
        (f"{THIS_MODULE}:NoSuchSerde", f"module '{THIS_MODULE}' has no attribute 'NoSuchSerde'"),
    ],
)
def test_bad_import_path(path: str, message: str) -> None:
    with pytest.raises(ImportError) as raised:
        resolve_serde(path)
    assert message in str(raised.value)
    with pytest.raises(ImportError):
        import_object(path)


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("json:", " (did you mean 'json'?)"),
        ("Msgpack", " (did you mean 'msgpack'?)"),
        ("avr", " (did you mean 'avro'?)"),
        ("yaml", ""),
        (":Serde", ""),
    ],
)
def test_a_name_neither_built_in_nor_an_import_path_lists_the_built_in_serdes(name: str, hint: str) -> None:
    with pytest.raises(UnknownSerde) as raised:
        resolve_serde(name)
    assert str(raised.value) == (
        f"unknown serde '{name}'{hint}: the built-in serdes are bytes, str, json, msgpack, and for topics "
        "with a schema registry avro, json_schema; a serde class of your own is named by its import path, "
        "like 'package.module:SerdeClass'"
    )
    with pytest.raises(ImportError, match=r"is not an import path like 'package\.module:Name'"):
        import_object(name)


def test_class_without_both_methods() -> None:
    with pytest.raises(TypeError, match=rf"'{THIS_MODULE}:HalfASerde' has no serialize\(obj\) and deserialize"):
        resolve_serde(f"{THIS_MODULE}:HalfASerde")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("no_such_module_xyz:Serde", r"unknown serde 'no_such_module_xyz:Serde': No module named"),
        (f"{THIS_MODULE}:NoSuchSerde", r"unknown serde '.*:NoSuchSerde': module '.*' has no attribute 'NoSuchSerde'"),
        ("jsn", r"unknown serde 'jsn' \(did you mean 'json'\?\): the built-in serdes are bytes, str, json, msgpack,"),
        (f"{THIS_MODULE}:HalfASerde", r"unknown serde '.*:HalfASerde': .* has no serialize\(obj\) and deserialize"),
        (f"{THIS_MODULE}:NeedsArguments", r"unknown serde '.*:NeedsArguments': .*charset"),
        (f"{THIS_MODULE}:NOT_A_CLASS", r"unknown serde '.*:NOT_A_CLASS': .*not callable"),
    ],
)
def test_bad_serde_in_an_app_names_the_field(path: str, message: str) -> None:
    app = {
        "app_id": "serdes",
        "topics": {"in": {"value_serde": path}},
        "processors": [{"name": "p", "class": "processors:Processor", "inputs": ["in"]}],
    }
    with pytest.raises(ConfigError, match=rf"^topics\.in\.value_serde: {message}"):
        parse_app(app)
