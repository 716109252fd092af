"""How window and session stores, and key-value stores with a TTL, lay their entries out in the bytes
keyspace of one key-value store.

A one-byte tag starts every key, so several kinds of entry share one store, and with it its changelog,
restore and snapshots:

- `00 "stream-time"`: the observed stream time, as a signed 64-bit big-endian value;
- `01 <key length> <key> <start>` (windows) or `01 <key length> <key> <end> <start>` (sessions): an
  entry, whose value is the value's bytes. A key's entries are one range, in time order; the length
  (4 bytes) keeps a key from being a prefix of another key's range;
- `02 <start> <key>` (windows) or `02 <end> <start> <key>` (sessions): the time index, with empty
  values: every key's entries in time order, for reads across keys and for expiry;
- `03 <start> <key>` (windows by time): an entry of a window store that has no per-key range reads,
  whose value is the value's bytes. Laid out in time order, it is its own time index: a window costs
  one key, and the windows that close or expire are one range read with their values;
- `04 <key>` (key-value stores with a TTL): an entry, whose value is its expiry (8 bytes, signed
  big-endian) and the value's bytes;
- `05 <expiry> <key>` (the same): the expiry index, with empty values: every key in the order
  of its expiry, for expiry in time order;
- `06 <key length> <key> <valid to>` (versioned tables): a key's version that a later one replaced,
  whose value is its valid-from time (8 bytes) and the version (stores/versioned.py). Keyed by the
  time it stopped being valid, so the version valid at a time is the first at or after it;
- `07 <time> <key>` (the same): the history's time index, with empty values: at `time` a version of
  `key` ended (or its latest version is a deletion from then), for expiry in time order;
- `08 <key>` (the same): a key's latest version, valid from the 8-byte time its value starts with.

Keys are the bytes of the store's key serde. A time is 8 bytes, big-endian, of the time plus 2**63:
byte order is time order, negative times included.
"""

from __future__ import annotations

import struct
from typing import Literal

from stores.ranges import prefix_end

StoreKind = Literal["key_value", "window", "window_by_time", "session"]
"""What a store's bytes hold: a key-value table, or the windows or sessions laid out here."""

MIN_TIME = -(2**63)
MAX_TIME = 2**63 - 1

STREAM_TIME_KEY = b"\x00stream-time"
ENTRY = b"\x01"
INDEX = b"\x02"
WINDOW_BY_TIME = b"\x03"
TTL_ENTRY = b"\x04"
TTL_INDEX = b"\x05"
VERSION = b"\x06"
VERSION_INDEX = b"\x07"
LATEST_VERSION = b"\x08"

_TIME = struct.Struct(">Q")
TIME_SIZE = _TIME.size
_ENTRY_HEAD = struct.Struct(">cI")  # the tag and the key's length: one pack for both
_TIME_OFFSET = 2**63
_INDEX_TIMES = len(INDEX) + TIME_SIZE
STREAM_TIME = struct.Struct(">q")


def time_bytes(time: int) -> bytes:
    return _TIME.pack(time + _TIME_OFFSET)


def time_at(data: bytes, position: int) -> int:
    """The time encoded at `position` of `data`."""
    return int(_TIME.unpack_from(data, position)[0]) - _TIME_OFFSET


def entries_of(key: bytes) -> bytes:
    """The prefix of every entry of `key`: its range in the store."""
    return _ENTRY_HEAD.pack(ENTRY, len(key)) + key


def time_range(prefix: bytes, earliest: int, latest: int) -> tuple[bytes, bytes] | None:
    """Bounds of the keys `prefix <time> ...` with `earliest <= time <= latest`; `None` when there are none."""
    earliest, latest = max(earliest, MIN_TIME), min(latest, MAX_TIME)
    if earliest > latest:
        return None
    end = prefix + time_bytes(latest + 1) if latest < MAX_TIME else prefix_end(prefix)
    assert end is not None  # a prefix starts with a tag below 0xff
    return prefix + time_bytes(earliest), end


def window_entry(key: bytes, start: int) -> bytes:
    """`entries_of(key) + time_bytes(start)`, in one expression: it is built once or twice per record."""
    return _ENTRY_HEAD.pack(ENTRY, len(key)) + key + _TIME.pack(start + _TIME_OFFSET)


def window_index(key: bytes, start: int) -> bytes:
    return INDEX + _TIME.pack(start + _TIME_OFFSET) + key


def window_of_index(index: bytes) -> tuple[bytes, int]:
    """The key and start an index entry of a window store names (or an entry of a window store by time)."""
    return index[_INDEX_TIMES:], time_at(index, len(INDEX))


def window_entry_of_index(index: bytes) -> bytes:
    """The entry an index entry of a window store names: its start's bytes are the entry's last ones."""
    key = index[_INDEX_TIMES:]
    return _ENTRY_HEAD.pack(ENTRY, len(key)) + key + index[len(INDEX) : _INDEX_TIMES]


def window_by_time(key: bytes, start: int) -> bytes:
    return WINDOW_BY_TIME + _TIME.pack(start + _TIME_OFFSET) + key


def session_entry(key: bytes, start: int, end: int) -> bytes:
    return entries_of(key) + time_bytes(end) + time_bytes(start)


def session_index(key: bytes, start: int, end: int) -> bytes:
    return INDEX + time_bytes(end) + time_bytes(start) + key


def ttl_index(key: bytes, expiry: int) -> bytes:
    return TTL_INDEX + _TIME.pack(expiry + _TIME_OFFSET) + key


def ttl_of_index(index: bytes) -> tuple[bytes, int]:
    """The key and expiry an expiry index entry names."""
    return index[_INDEX_TIMES:], time_at(index, len(TTL_INDEX))


def version_entry(key: bytes, valid_to: int) -> bytes:
    return _ENTRY_HEAD.pack(VERSION, len(key)) + key + _TIME.pack(valid_to + _TIME_OFFSET)


def versions_of(key: bytes) -> bytes:
    """The prefix of every past version of `key`: its range in the store, in the order of their ends."""
    return _ENTRY_HEAD.pack(VERSION, len(key)) + key


def version_index(key: bytes, time: int) -> bytes:
    return VERSION_INDEX + _TIME.pack(time + _TIME_OFFSET) + key


def version_of_index(index: bytes) -> tuple[bytes, int]:
    """The key and time a history index entry names."""
    return index[_INDEX_TIMES:], time_at(index, len(VERSION_INDEX))


def session_of_index(index: bytes) -> tuple[bytes, int, int]:
    """The key, start and end an index entry of a session store names."""
    return index[_INDEX_TIMES + TIME_SIZE :], time_at(index, _INDEX_TIMES), time_at(index, len(INDEX))
