"""A dead letter's stack trace reads as Python prints the exception, carets aside, though its frames are
formatted once per path through the code."""

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


@pytest.mark.parametrize("fails", [lookup, wrapped, handled, noted, grouped, syntax, silent])
@pytest.mark.parametrize("key", ["first", "second", "quiet"])
def test_the_trace_is_pythons_without_carets(fails: Callable[[str], int], key: str) -> None:
    error = raised(fails, key)
    assert without_carets(stack_trace(error).decode()) == without_carets("".join(traceback.format_exception(error)))


def test_each_record_gets_its_own_message_on_a_path_formatted_once() -> None:
    first, second = (stack_trace(raised(wrapped, key)).decode() for key in ("first", "second"))
    assert first.endswith("ValueError: no value for first\n") and "KeyError: 'first'" in first
    assert second.endswith("ValueError: no value for second\n") and "KeyError: 'second'" in second
    assert first.replace("first", "second") == second
