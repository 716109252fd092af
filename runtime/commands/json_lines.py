"""Keys, values and headers as JSON, the form `produce` reads and `consume` writes.

JSON has no bytes: bytes are written as `{"$base64": "..."}`, and that form is read back as bytes.
The keys and values of a bytes-serde topic and header values, bytes by nature, are written as text
when they are UTF-8 (and text read for them is encoded as UTF-8), so a topic of text reads as text.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import date, datetime, time
from typing import Any

BASE64 = "$base64"


def dumps(line: dict[str, Any]) -> str:
    return json.dumps(line, ensure_ascii=False, separators=(",", ":"))


def jsonable(value: Any) -> Any:
    """A decoded key or value as JSON holds it: bytes in their base64 form, times as ISO 8601, and
    what JSON has no type for (decimals, UUIDs, a user serde's objects) as its text."""
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return {BASE64: base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {_key(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(item) for item in value]
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    return str(value)


def _key(key: Any) -> Any:
    """A map's key: JSON's keys are text, so bytes that are not UTF-8 are their base64 text."""
    if isinstance(key, bytes):
        text = raw_jsonable(key)
        return text if isinstance(text, str) else text[BASE64]
    return key if key is None or isinstance(key, str | int | float) else str(key)


def raw_jsonable(data: bytes) -> str | dict[str, str]:
    """Bytes as they are: text when they are UTF-8, else their base64 form."""
    try:
        return data.decode()
    except UnicodeDecodeError:
        return {BASE64: base64.b64encode(data).decode()}


def from_jsonable(value: Any) -> Any:
    """A key or value read from JSON, its base64 forms turned back into bytes, wherever they are nested."""
    if isinstance(value, dict):
        if set(value) == {BASE64}:
            return _decoded(value[BASE64])
        return {key: from_jsonable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_jsonable(item) for item in value]
    return value


def raw_bytes(value: Any, what: str) -> bytes:
    """The bytes of a bytes-serde key or value, or of a header value: text (as UTF-8) or the base64 form."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, dict) and set(value) == {BASE64}:
        return _decoded(value[BASE64])
    raise ValueError(f'{what} must be text or {{"{BASE64}": "..."}}, not {json.dumps(value)}')


def _decoded(text: Any) -> bytes:
    if not isinstance(text, str):
        raise ValueError(f'"{BASE64}" takes a string of base64, not {json.dumps(text)}')
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as error:
        raise ValueError(f'"{BASE64}": {text!r} is not base64 ({error})') from None
