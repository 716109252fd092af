"""A key given as text, encoded as its topic or store holds it: what `replay`, a replay job's request and a
query of a store name a key by."""

from __future__ import annotations

import json

from processors.serdes import Serde


class KeyNotEncodable(ValueError):
    """The key serde takes neither the text nor the JSON it holds."""


def encoded_key(serde: Serde, raw: bool, text: str) -> bytes:
    """KEY as its topic or store holds it: text for a str or bytes key, JSON for the rest."""
    if raw:
        return text.encode()
    try:
        return serde.serialize(text)
    except Exception:  # a key serde that takes structured keys: the text is JSON
        try:
            return serde.serialize(json.loads(text))
        except (ValueError, TypeError) as error:
            raise KeyNotEncodable(f"the key serde cannot encode '{text}' ({error})") from None
