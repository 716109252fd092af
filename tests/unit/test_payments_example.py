"""The payments example's validation rules and routing, its per-account totals, and the demo's checks, without Kafka."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgpack
import pytest

from examples.payments.generate import INVALID, POISON, VALID, Payment, make_payments, opening_totals
from examples.payments.processors import ValidatePayment, rejection_reason
from examples.payments.run import APP_YAML, ROOT, added_totals, check, check_totals, growth, money
from examples.payments.snapshot_demo import demo_app
from examples.payments.totals import AccountTotals
from processors import Context, Record
from processors.context import Punctuation, PunctuationTime
from runtime.config import SnapshotsConfig, load_app
from stores import BufferedKeyValueStore, MemoryBackend, ReadOnlyView, SessionView, WindowView
from stores.partitioner import partition_for
from stores.serdes import resolve_serde


class FakeContext(Context):
    """Collects what the processor sends; `stores` are what `store()` hands out."""

    def __init__(self, params: Mapping[str, Any], stores: Mapping[str, BufferedKeyValueStore] | None = None) -> None:
        self._params = params
        self._stores = stores or {}
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

    @property
    def stream_time(self) -> int:
        return -1

    def send(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
        timestamp: int | None = None,
    ) -> None:
        self.sent.append((topic, key, value))

    def store(self, name: str) -> BufferedKeyValueStore:
        if name not in self._stores:
            raise KeyError(f"no store '{name}' declared")
        return self._stores[name]

    def window_store(self, name: str) -> WindowView:
        raise AssertionError("the payments processors keep no windows")

    def session_store(self, name: str) -> SessionView:
        raise AssertionError("the payments processors keep no sessions")

    def global_store(self, name: str) -> ReadOnlyView:
        raise AssertionError("the payments processors read no global store")

    def schedule(self, every_ms: int, callback: Punctuation, time: PunctuationTime = "wall_clock") -> None:
        raise AssertionError("the payments processors schedule nothing")

    def count(self, name: str, amount: int = 1) -> None:
        raise AssertionError("the payments processors count nothing")


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


# AccountTotals: the second stage.

ACCOUNT, OTHER = "40817810000000000001", "40817810000000000002"


def totals_store() -> BufferedKeyValueStore:
    """As the app YAML declares it: str keys, msgpack values (here in memory)."""
    return BufferedKeyValueStore(MemoryBackend(), resolve_serde("str"), resolve_serde("msgpack"), name="account-totals")


class TotalsTask:
    """An AccountTotals task over `store`, fed records of payments-valid partition 0 as the runtime would."""

    def __init__(self, store: BufferedKeyValueStore) -> None:
        self.store = store
        self.ctx = FakeContext({}, {"account-totals": store})
        self.processor = AccountTotals()
        self.processor.init(self.ctx)

    def feed(self, offset: int, account: str = ACCOUNT, amount: int = 100, currency: str = "RUB") -> Any:
        """Process one valid payment at `offset`; return the value sent for it."""
        value = payment(payment_id=f"p-{offset}", account=account, amount_minor=amount, currency=currency)
        self.ctx.sent.clear()
        self.processor.process(Record("payments-valid", 0, offset, 0, account, value), self.ctx)
        [(topic, key, sent)] = self.ctx.sent
        assert (topic, key) == ("account-totals", account)
        return sent


def test_totals_add_up_per_account_and_currency() -> None:
    totals = TotalsTask(totals_store())
    assert totals.feed(0, amount=150) == {"count": 1, "totals": {"RUB": 150}}
    assert totals.feed(1, amount=50) == {"count": 2, "totals": {"RUB": 200}}
    assert totals.feed(2, OTHER, amount=7, currency="USD") == {"count": 1, "totals": {"USD": 7}}
    assert totals.feed(3, amount=1, currency="EUR") == {"count": 3, "totals": {"RUB": 200, "EUR": 1}}
    assert totals.store.get(ACCOUNT) == {"count": 3, "totals": {"RUB": 200, "EUR": 1}, "offset": 3}
    assert totals.store.get(OTHER) == {"count": 1, "totals": {"USD": 7}, "offset": 2}


def test_a_redelivered_payment_is_not_counted_again_but_its_totals_are_sent_again() -> None:
    totals = TotalsTask(totals_store())
    totals.feed(10, amount=100)
    totals.feed(11, OTHER, amount=5)
    totals.feed(12, amount=30)
    # At-least-once: after a crash the records since the last commit come again, and the store
    # (restored from its changelog) may already hold their effect.
    for offset in (10, 12):
        assert totals.feed(offset, amount=100) == {"count": 2, "totals": {"RUB": 130}}
    assert totals.feed(11, OTHER, amount=5) == {"count": 1, "totals": {"RUB": 5}}
    assert totals.feed(13, amount=1) == {"count": 3, "totals": {"RUB": 131}}


def test_totals_continue_from_the_store_after_a_restart() -> None:
    store = totals_store()
    first = TotalsTask(store)
    for offset in range(5):
        first.feed(offset, amount=10)
    store.flush()  # what the engine does at a commit
    first.processor.close()
    second = TotalsTask(store)  # a new task over the same (kept or restored) store: offsets 3.. come again
    assert [second.feed(offset, amount=10)["count"] for offset in range(3, 8)] == [5, 5, 6, 7, 8]
    assert store.get(ACCOUNT)["totals"] == {"RUB": 80}


def test_totals_names_come_from_params() -> None:
    store = totals_store()
    ctx = FakeContext({"output_topic": "table", "store": "sums"}, {"sums": store})
    processor = AccountTotals()
    processor.init(ctx)
    processor.process(Record("payments-valid", 0, 0, 0, ACCOUNT, payment()), ctx)
    assert ctx.sent == [("table", ACCOUNT, {"count": 1, "totals": {"RUB": 999}})]
    with pytest.raises(KeyError, match="account-totals"):
        AccountTotals().init(FakeContext({}, {"sums": store}))


def test_totals_raise_on_a_value_that_is_not_a_payment() -> None:
    totals = TotalsTask(totals_store())
    with pytest.raises(TypeError, match=r"payments-valid\[0\]@4 is a list, expected a payment map"):
        totals.processor.process(Record("payments-valid", 0, 4, 0, ACCOUNT, ["p-1"]), totals.ctx)
    assert totals.store.get(ACCOUNT) is None


def test_the_app_yaml_declares_the_totals_stage_and_its_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PAYMENTS_STATE_DIR", raising=False)
    config = load_app(ROOT / APP_YAML)
    validate, totals = config.processors
    assert totals.inputs == [validate.params["valid_topic"]] == ["payments-valid"]
    assert totals.outputs == ["account-totals"] and config.topics["account-totals"].cleanup_policy == "compact"
    store = totals.stores["account-totals"]
    assert (store.backend, store.changelog, store.key_serde) == ("rocksdb", True, "str")
    assert str(config.state_dir) == "state"
    monkeypatch.setenv("PAYMENTS_STATE_DIR", "/tmp/elsewhere")
    assert str(load_app(ROOT / APP_YAML).state_dir) == "/tmp/elsewhere"


# The demo's check of the totals.


def test_added_totals_count_only_the_valid_payments() -> None:
    def generated(kind: str, **changes: Any) -> Payment:
        return Payment(b"p", msgpack.packb(payment(**changes)), kind)

    payments = [
        generated(VALID, amount_minor=5),
        generated(VALID, amount_minor=7, currency="USD"),
        generated(VALID, account=OTHER),
        generated(INVALID, amount_minor=-1),
        Payment(b"p", b"\xc1", POISON),
    ]
    assert added_totals(payments) == {
        ACCOUNT: {"count": 2, "totals": {"RUB": 5, "USD": 7}},
        OTHER: {"count": 1, "totals": {"RUB": 999}},
    }


def test_growth_is_the_difference_per_count_and_currency() -> None:
    before = {"count": 3, "totals": {"RUB": 100, "USD": 5}}
    assert growth(before, {"count": 5, "totals": {"RUB": 150, "USD": 5, "EUR": 2}}) == {
        "count": 2,
        "totals": {"EUR": 2, "RUB": 50},
    }
    assert growth(None, {"count": 1, "totals": {"RUB": 1}}) == {"count": 1, "totals": {"RUB": 1}}
    assert growth(before, None) == {"count": -3, "totals": {"RUB": -100, "USD": -5}}


def test_the_demo_check_finds_totals_that_did_not_grow_by_this_run() -> None:
    added = {"a": {"count": 2, "totals": {"RUB": 30}}, "b": {"count": 1, "totals": {"USD": 4}}}
    before = {"a": {"count": 1, "totals": {"RUB": 10}}}
    after = {"a": {"count": 3, "totals": {"RUB": 40}}, "b": {"count": 1, "totals": {"USD": 4}}}
    assert check_totals(added, before, after) == []
    assert check_totals(added, before, {"a": after["a"]}) == [
        "1 accounts of this run missing from account-totals, e.g. b"
    ]
    counted_twice = {**after, "a": {"count": 4, "totals": {"RUB": 55}}}
    assert check_totals(added, before, counted_twice) == [
        "1 accounts whose totals in account-totals grew by other sums than this run's payments, "
        "e.g. a: +3 payments {'RUB': 45}, expected +2 {'RUB': 30}"
    ]


def test_money_shows_major_units() -> None:
    assert money({"USD": 5, "RUB": 123456789}) == "RUB 1,234,567.89, USD 0.05"


def test_opening_totals_are_of_the_accounts_the_payments_go_to_and_count_none_of_them() -> None:
    opening = list(opening_totals(2000, seed=9))
    accounts = {account for account, *_ in opening}
    assert len(accounts) == len(opening) == 100
    paid = {msgpack.unpackb(p.value)["account"] for p in make_payments(2000, seed=9) if p.kind == VALID}
    assert paid <= accounts
    assert all(count > 0 and totals["RUB"] > 0 and offset == -1 for _, count, totals, offset in opening)
    assert opening == list(opening_totals(2000, seed=9))


def test_a_bootstrapped_account_goes_on_from_its_opening_totals() -> None:
    store = BufferedKeyValueStore(MemoryBackend(), resolve_serde("str"), resolve_serde("msgpack"))
    account, count, totals, offset = next(opening_totals(200, seed=3))
    store.put(account, {"count": count, "totals": totals, "offset": offset})
    ctx = FakeContext({}, {"account-totals": store})
    processor = AccountTotals()
    processor.init(ctx)
    payment = {"account": account, "currency": "RUB", "amount_minor": 250}
    processor.process(Record("payments-valid", 0, 0, 0, account, payment, ()), ctx)
    assert store.get(account)["count"] == count + 1
    assert store.get(account)["totals"] == {"RUB": totals["RUB"] + 250}


def test_the_snapshot_demo_runs_the_app_on_its_own_topics_with_a_snapshot_location(tmp_path: Path) -> None:
    config = load_app(demo_app(tmp_path, "x1"))
    example = load_app(ROOT / APP_YAML)
    assert config.app_id != example.app_id
    declared = {name for name in example.topics if name != example.dead_letter_topic}  # dead letters: implicit
    assert set(config.topics) - {config.dead_letter_topic} == {f"{name}-x1" for name in declared}
    totals = config.processors[1]
    assert totals.params == {"output_topic": "account-totals-x1", "store": "account-totals"}
    assert config.snapshots_for(totals.stores["account-totals"]) == SnapshotsConfig(location=tmp_path / "snapshots")
    assert config.state_dir == tmp_path / "state"
    assert example.snapshots is None, "make example restores without snapshots"
