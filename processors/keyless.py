"""What the built-in operators do with a record that has no key (or, de-duplicating, no id).

By default as Kafka Streams does (KIP-962, KIP-655): such a record is alone, of no group and no key, so an
aggregation or an inner join drops it and counts it (`keyless_records`), a left or outer join sends it at
once with nothing on the other side, and de-duplication forwards it, never a duplicate. `one_key` treats
every such record as one key, null: they are aggregated together, join each other, repeat each other.
"""

from __future__ import annotations

from typing import Final, Literal

Keyless = Literal["alone", "one_key"]
NullId = Literal["alone", "one_id"]

KEYLESS: Final = "keyless_records"  # ctx.count name: a record without a key, dropped
