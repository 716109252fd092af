"""A dead letter's stack trace reads as Python prints the exception, carets and the frame that caught it aside,
though its frames are formatted once per path through the code."""

from __future__ import annotations

import traceback
from collections.abc import Callable

import pytest

from runtime.task.stack_traces import stack_trace


def lookup(key: str) -> int:
    return {"a": 1}[key]


def wrapped(key: str) -> int:
    try:
        return lookup(key)
    except KeyError as error:
        raise ValueError(f"no value for {key}") from error


def handled(key: str) -> int:
    try:
        return wrapped(key)
    except ValueError:
        if key == "quiet":
            raise RuntimeError("while handling") from None
        raise RuntimeError("while handling")  # noqa: B904 (the context is what is tested)


def noted(key: str) -> int:
    try:
        return lookup(key)
    except KeyError as error:
        error.add_note(f"looked up {key}")
        raise


def grouped(key: str) -> int:
    raise ExceptionGroup("several", [KeyError(key), ValueError(key)])


def syntax(key: str) -> int:
    exec(f"{key} +")
    return 0


class Silent(Exception):
    def __str__(self) -> str:
        raise TypeError("no text")


def silent(key: str) -> int:
    raise Silent(key)


def raised(fails: Callable[[str], int], key: str) -> BaseException:
    try:
        fails(key)
    except BaseException as error:
        return error
    raise AssertionError("it did not raise")


def without_carets(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not set(line.strip()) <= set("^~"))


def pythons_below_the_catcher(error: BaseException) -> str:
    """Python's trace of `error` from below the frame that caught it (`raised`'s, as the record loop's would be);
    an exception group keeps all its frames. Changes `error`'s traceback."""
    tb = error.__traceback__
    if not isinstance(error, BaseExceptionGroup) and tb is not None and tb.tb_next is not None:
        error.with_traceback(tb.tb_next)
    return "".join(traceback.format_exception(error))


@pytest.mark.parametrize("fails", [lookup, wrapped, handled, noted, grouped, syntax, silent])
@pytest.mark.parametrize("key", ["first", "second", "quiet"])
def test_the_trace_is_pythons_without_carets_nor_the_catchers_frame(fails: Callable[[str], int], key: str) -> None:
    error = raised(fails, key)
    trace = stack_trace(error).decode()
    assert without_carets(trace) == without_carets(pythons_below_the_catcher(error))


def test_the_frame_that_caught_the_error_is_left_out_and_a_causes_are_kept() -> None:
    trace = stack_trace(raised(wrapped, "first")).decode()
    assert "in raised" not in trace, "the catcher's frame"
    assert trace.count("in wrapped") == 2 and "in lookup" in trace, "the cause's frames, and the error's below it"


def test_each_record_gets_its_own_message_on_a_path_formatted_once() -> None:
    first, second = (stack_trace(raised(wrapped, key)).decode() for key in ("first", "second"))
    assert first.endswith("ValueError: no value for first\n") and "KeyError: 'first'" in first
    assert second.endswith("ValueError: no value for second\n") and "KeyError: 'second'" in second
    assert first.replace("first", "second") == second
