"""The payments example's validation rules and routing, without Kafka."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import msgpack
import pytest

from examples.payments.generate import INVALID, POISON, VALID, make_payments, partition_for
from examples.payments.processors import ValidatePayment, rejection_reason
from examples.payments.run import check
from processors import Context, Record
from processors.context import Punctuation
from stores import KeyValueStore


class FakeContext(Context):
    """Collects what the processor sends."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        self._params = params
        self.sent: list[tuple[str, Any, Any]] = []

    @property
    def app_id(self) -> str:
        return "payments-validator"

    @property
    def processor_name(self) -> str:
        return "validate"

    @property
    def partition(self) -> int:
        return 0

    @property
    def params(self) -> Mapping[str, Any]:
        return self._params

    def send(self, topic: str, value: Any, key: Any = None, headers: Sequence[tuple[str, bytes]] | None = None) -> None:
        self.sent.append((topic, key, value))

    def store(self, name: str) -> KeyValueStore:
        raise KeyError(f"the validator declares no store '{name}'")

    def schedule(self, every_ms: int, callback: Punctuation) -> None:
        raise AssertionError("ValidatePayment schedules nothing")


PARAMS = {"valid_topic": "ok", "rejected_topic": "bad", "max_amount_minor": 1000}


def payment(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "payment_id": "p-1",
        "terminal_id": "T0000001",
        "account": "40817810000000000001",
        "amount_minor": 999,
        "currency": "RUB",
        "created_at": 1_767_225_600_000,
    }
    base.update(changes)
    return {name: value for name, value in base.items() if value is not ...}


def run(value: Any, params: Mapping[str, Any] = PARAMS) -> list[tuple[str, Any, Any]]:
    ctx = FakeContext(params)
    processor = ValidatePayment()
    processor.init(ctx)
    processor.process(Record("payments", 3, 42, 0, "p-1", value), ctx)
    processor.close()
    return ctx.sent


def test_valid_payment_goes_on_keyed_by_account() -> None:
    assert run(payment()) == [("ok", "40817810000000000001", payment())]


def test_the_limit_itself_is_allowed() -> None:
    assert run(payment(amount_minor=1000))[0][0] == "ok"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"amount_minor": 0}, "amount_minor must be positive, got 0"),
        ({"amount_minor": -5}, "amount_minor must be positive, got -5"),
        ({"amount_minor": 1001}, "amount_minor 1001 is above the limit 1000"),
        ({"currency": "GBP"}, "unknown currency 'GBP'"),
        ({"currency": "rub"}, "unknown currency 'rub'"),
        ({"account": ...}, "missing fields: account"),
        ({"terminal_id": "", "currency": None}, "missing fields: terminal_id, currency"),
        ({"amount_minor": "999"}, "amount_minor must be int, got str"),
        ({"amount_minor": True}, "amount_minor must be int, got bool"),
        ({"account": 40817810}, "account must be str, got int"),
    ],
)
def test_invalid_payment_is_rejected_with_its_reason(changes: dict[str, Any], reason: str) -> None:
    assert run(payment(**changes)) == [("bad", "p-1", {**payment(**changes), "reason": reason})]


def test_params_may_arrive_as_strings_or_be_left_out() -> None:
    # `${VAR:-default}` in the YAML yields strings; without params the app's topic names are used.
    assert run(payment(amount_minor=1001), {"max_amount_minor": "2000"})[0][0] == "payments-valid"
    assert run(payment(amount_minor=0), {})[0][0] == "payments-rejected"


def test_input_is_not_modified() -> None:
    value = payment(currency="XXX")
    run(value)
    assert "reason" not in value


@pytest.mark.parametrize("poison", [["p-1"], "p-1", None, 7])
def test_a_value_that_is_not_a_map_raises_for_the_error_policy(poison: Any) -> None:
    with pytest.raises(TypeError, match=r"payment 'p-1' at payments\[3\]@42 is a .*, expected a map"):
        run(poison)


def test_generated_payments_are_deterministic_and_classified_as_the_processor_does() -> None:
    payments = list(make_payments(2000, invalid_ratio=0.1, seed=7, poison_ratio=0.01))
    assert payments == list(make_payments(2000, invalid_ratio=0.1, seed=7, poison_ratio=0.01))
    assert payments != list(make_payments(2000, invalid_ratio=0.1, seed=8, poison_ratio=0.01))
    kinds = {kind: sum(p.kind == kind for p in payments) for kind in (VALID, INVALID, POISON)}
    assert kinds[VALID] > 1600 and 100 < kinds[INVALID] < 300 and 5 < kinds[POISON] < 50
    assert len({p.key for p in payments}) == len(payments)
    for generated in payments:
        try:
            value = msgpack.unpackb(generated.value)
        except ValueError:
            assert generated.kind == POISON
            continue
        if generated.kind == POISON:
            assert not isinstance(value, dict)
            continue
        assert value["payment_id"].encode() == generated.key
        verdict = rejection_reason(value, max_amount_minor=100_000_000)
        assert (verdict is None) == (generated.kind == VALID), (value, verdict)


def test_partition_matches_the_java_default_partitioner() -> None:
    # murmur2 values from Kafka's UtilsTest; Java picks toPositive(murmur2(key)) % partitions.
    java_hashes = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536}
    for key, java_hash in java_hashes.items():
        for partitions in (1, 6, 7):
            assert partition_for(key, partitions) == (java_hash & 0x7FFFFFFF) % partitions


def test_the_demo_check_finds_missing_and_misplaced_payments() -> None:
    expected = {"a": VALID, "b": VALID, "c": INVALID}
    found = {
        VALID: ("payments-valid", Counter({"a": 2, "c": 1, "from-an-earlier-run": 1})),
        INVALID: ("payments-rejected", Counter[str]()),
        POISON: ("dead-letters", Counter[str]()),
    }
    assert check(expected, found) == [
        "1 valid payments missing from payments-valid, e.g. b",
        "1 payments in payments-valid that are not valid, e.g. c",
        "1 invalid payments missing from payments-rejected, e.g. c",
    ]
    found[VALID] = ("payments-valid", Counter({"a": 1, "b": 2}))  # a duplicate is allowed (at least once)
    found[INVALID] = ("payments-rejected", Counter({"c": 1}))
    assert check(expected, found) == []
