"""The built-in serdes (bytes, str, json, msgpack) and how a serde named in the YAML becomes an instance."""

from __future__ import annotations

import difflib
import functools
import importlib
import json
from collections.abc import Callable
from typing import Any

import msgpack
import msgspec
import orjson

from processors.serdes import Serde


class BytesSerde:
    def serialize(self, obj: Any) -> bytes:
        if not isinstance(obj, bytes | bytearray | memoryview):
            raise TypeError(f"the bytes serde takes bytes, got {type(obj).__name__}")
        return bytes(obj)

    def deserialize(self, data: bytes) -> Any:
        return data


class StrSerde:
    """UTF-8. Reading is `bytes.decode` itself, with no Python frame between a record and it (Kafka's
    records and the stores give bytes)."""

    deserialize: Callable[[bytes], Any]

    def __init__(self) -> None:
        self.deserialize = bytes.decode

    def serialize(self, obj: Any) -> bytes:
        return str(obj).encode()


class JsonSerde:
    """UTF-8 JSON. Written by orjson (several times faster than the standard library, which matters for
    JSON-heavy topics such as database change feeds), the standard library writing what orjson does not
    (integers beyond 64 bits). Read by msgspec's decoder, bound as it is (no Python frame between a
    record and it): as fast as orjson's, and exact for integers of any size, where orjson turns those
    beyond 64 bits into floats. Both refuse what is not strict JSON (NaN, lone surrogates)."""

    deserialize: Callable[[bytes], Any]

    def __init__(self) -> None:
        self.deserialize = msgspec.json.Decoder().decode

    def serialize(self, obj: Any) -> bytes:
        try:
            # Copied: orjson's result keeps its whole write buffer (kilobytes), and stores keep values.
            # (A join of two parts always builds a new object: half the cost of `bytes(memoryview(...))`.)
            return b"".join((orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS), b""))
        except TypeError:  # an integer beyond 64 bits, or a type neither library encodes
            return _JSON_ENCODER.encode(obj).encode()


_JSON_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


class MsgpackSerde:
    """msgpack's own C functions, bound as they are: no Python frame between a record and msgpack."""

    serialize: Callable[[Any], bytes]
    deserialize: Callable[[bytes], Any]

    def __init__(self) -> None:
        self.serialize = msgpack.Packer().pack
        self.deserialize = functools.partial(msgpack.unpackb, strict_map_key=False)


class RawSerde:
    """Bytes as they are, unchecked and without a Python frame: for the store under a window or
    session store, whose keys and values that view has already laid out as bytes."""

    serialize: Callable[[Any], bytes]
    deserialize: Callable[[bytes], Any]

    def __init__(self) -> None:
        self.serialize = self.deserialize = bytes


BUILTIN_SERDES: dict[str, type[Serde]] = {
    "bytes": BytesSerde,
    "str": StrSerde,
    "json": JsonSerde,
    "msgpack": MsgpackSerde,
}


# Serdes of topics whose schemas a schema registry keeps: the engine builds them for a topic, with the
# app's `schema_registry` (runtime/schema_registry/); a name alone does not make one.
REGISTRY_SERDES = ("avro", "json_schema")


class UnknownSerde(LookupError):
    """A serde name that is neither built in nor an import path: the message lists the valid ones."""

    def __init__(self, name: str):
        close = difflib.get_close_matches(name, [*BUILTIN_SERDES, *REGISTRY_SERDES], n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        super().__init__(
            f"unknown serde '{name}'{hint}: the built-in serdes are {', '.join(BUILTIN_SERDES)}, and for "
            f"topics with a schema registry {', '.join(REGISTRY_SERDES)}; a serde class of your own is named by "
            "its import path, like 'package.module:SerdeClass'"
        )


class RegistrySerdeOutsideTopic(LookupError):
    """A registry serde named where no topic gives it a subject (a store's keys and values)."""

    def __init__(self, name: str):
        super().__init__(
            f"serde '{name}' keeps its schemas in a schema registry, under a topic's subject, so it serves "
            f"topics only: here the serdes are {', '.join(BUILTIN_SERDES)} or a class of your own"
        )


def _import_path_parts(path: str) -> tuple[str, str] | None:
    """(module, attribute) of `package.module:Name` or `package.module.Name`; None for anything else."""
    module_name, _, attribute = path.partition(":") if ":" in path else path.rpartition(".")
    return (module_name, attribute) if module_name and attribute else None


def import_object(path: str) -> Any:
    """Import `package.module:Name` (or `package.module.Name`)."""
    parts = _import_path_parts(path)
    if parts is None:
        raise ImportError(f"'{path}' is not an import path like 'package.module:Name'")
    module_name, attribute = parts
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ImportError(f"module '{module_name}' has no attribute '{attribute}'") from None


def resolve_serde(name: str) -> Serde:
    """A built-in serde by name, or an instance of a user class by import path."""
    builtin = BUILTIN_SERDES.get(name)
    if builtin is not None:
        return builtin()
    if name in REGISTRY_SERDES:
        raise RegistrySerdeOutsideTopic(name)
    if _import_path_parts(name) is None:
        raise UnknownSerde(name)
    serde = import_object(name)()
    if not isinstance(serde, Serde):
        raise TypeError(f"'{name}' has no serialize(obj) and deserialize(data) methods")
    return serde
