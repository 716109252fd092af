"""A record a topic would refuse is caught when it is sent, and a dead letter is cut down to fit."""

from __future__ import annotations

import pytest

from runtime.kafka.record_limits import RecordRefused, TopicLimits, record_size
from runtime.task.context import TaskContext
from runtime.task.failures import fit_dead_letter
from stores.serdes import resolve_serde

ERROR_HEADERS = [("error.stage", b"deserialization"), ("error.message", b"bad"), ("error.stacktrace", b"T" * 500)]


def context(limits: TopicLimits) -> TaskContext:
    serdes = {"out": (resolve_serde("str"), resolve_serde("bytes"))}
    return TaskContext("app", "echo", 0, {}, frozenset(["out"]), serdes, {}, None, {"out": limits})


@pytest.mark.parametrize("headers", [None, [("h", b"v")]])
def test_send_refuses_a_record_above_the_topics_limit_and_keeps_the_rest(
    headers: list[tuple[str, bytes]] | None,
) -> None:
    ctx = context(TopicLimits(10_000))
    ctx.send("out", b"x" * 9_000, key="k", headers=headers)
    with pytest.raises(RecordRefused, match=r"topic 'out' is 10,\d{3} bytes .* above the 10,000 bytes it takes"):
        ctx.send("out", b"x" * 10_000, key="k", headers=headers)
    assert [len(output.value or b"") for output in ctx.pending] == [9_000]


def test_send_refuses_a_keyless_record_for_a_compacted_topic() -> None:
    ctx = context(TopicLimits(10_000, needs_key=True))
    with pytest.raises(RecordRefused, match="topic 'out' is compacted: a record sent to it needs a key"):
        ctx.send("out", b"v")
    ctx.send("out", b"v", key="k")
    assert len(ctx.pending) == 1


def test_a_dead_letter_that_fits_is_kept_whole() -> None:
    key, value, headers = fit_dead_letter(b"k", b"v" * 100, [("h", b"1")], ERROR_HEADERS, 10_000)
    assert (key, value, headers) == (b"k", b"v" * 100, [("h", b"1"), *ERROR_HEADERS])


def test_a_dead_letter_too_large_loses_value_bytes_first_and_says_so() -> None:
    key, value, headers = fit_dead_letter(b"key", b"v" * 20_000, [("h", b"1")], ERROR_HEADERS, 10_000)
    assert key == b"key" and value is not None and 8_000 < len(value) < 10_000
    assert headers == [("h", b"1"), *ERROR_HEADERS, ("error.truncated", b"key=3,value=20000,headers=2")]
    assert 10_000 - 10 <= record_size(key, value, headers) <= 10_000


def test_then_the_key_then_the_inputs_headers_then_the_stack_trace() -> None:
    key, value, headers = fit_dead_letter(b"k" * 5_000, b"v" * 5_000, [("h", b"1" * 3_000)], ERROR_HEADERS, 1_000)
    assert value == b"" and key is not None and len(key) < 1_000
    assert [name for name, _ in headers] == ["error.stage", "error.message", "error.stacktrace", "error.truncated"]
    assert dict(headers)["error.truncated"] == b"key=5000,value=5000,headers=3001"
    assert record_size(key, value, headers) <= 1_000
    key, value, headers = fit_dead_letter(None, None, [], ERROR_HEADERS, 400)
    assert (key, value) == (None, None) and dict(headers)["error.message"] == b"bad"
    assert len(dict(headers)["error.stacktrace"]) < 500 and record_size(key, value, headers) <= 400
