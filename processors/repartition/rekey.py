"""Sends each record on under a new key, so that the processor after it is co-partitioned on that key:
the stage `repartition: {key: ...}` puts in front of a processor, writing to the app's topic
`<app>-<processor>-repartition` (Kafka Streams' `selectKey` and repartition topic)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, field_validator

from processors.context import Context
from processors.processor import Processor
from processors.record import Record

KeyOf = Callable[[Record], Any]


class RekeyParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str  # a field of the value, or `module:function` taking the record and returning its new key
    output: str

    _a_field_or_a_function = field_validator("key")(classmethod(lambda cls, key: checked_key(key)))


def checked_key(key: str) -> str:
    """A field's name, or the path of a function that imports."""
    if ":" in key:
        key_function(key)
    elif not key:
        raise ValueError("expected the name of a field of the value, or module:function")
    return key


def key_function(path: str) -> KeyOf:
    """The function a `module:function` path names; a ValueError says what is wrong with it."""
    from importlib import import_module

    module_name, _, name = path.partition(":")
    try:
        found = getattr(import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as error:
        raise ValueError(f"cannot import the key function '{path}': {error}") from None
    if not callable(found):
        raise ValueError(f"'{path}' is not a function")
    function: KeyOf = found
    return function


class Rekey(Processor):
    """Sends each record's value and headers to `params.output`, keyed by `params.key`: the value's field
    of that name, or what the function of that path returns for the record. A record without the field
    goes to the processing error policy."""

    Params: ClassVar[type[RekeyParams]] = RekeyParams

    def init(self, ctx: Context) -> None:
        params = self.Params.model_validate(ctx.params)
        self.output = params.output
        self.field = None if ":" in params.key else params.key
        self.key_of = key_function(params.key) if self.field is None else None

    def process(self, record: Record, ctx: Context) -> None:
        if self.key_of is not None:
            key = self.key_of(record)
        else:
            value = record.value
            if not isinstance(value, dict) or self.field not in value:
                raise KeyError(f"the value has no field '{self.field}' to key it by: {value!r}")
            key = value[self.field]
        ctx.send(self.output, record.value, key=key, headers=record.headers)
