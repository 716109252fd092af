"""A failed record's stack trace, as its dead letter carries it, at a cost a record can bear.

`traceback.format_exception` costs more than processing a record many times over: for every frame it
finds the instruction's position by walking the code's positions from the start, reads the source line,
and compiles it to point carets at the failing expression. A processor that fails on every record fails
the same way each time, so the frames of each traceback are formatted once per path through the code
(the code objects and instructions it passed) and kept; only the exception's own line is formatted each time,
and without `format_exception_only`, which takes in the whole chain of causes again for each line. The
trace reads as Python prints it, chained exceptions included, without the carets.
"""

from __future__ import annotations

import traceback
from types import CodeType, TracebackType

CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"
HEAD = "Traceback (most recent call last):\n"
KEPT = 1024  # formatted paths; past that many, the cache starts over
# A path's frames, formatted, by the identities of its code objects and its instructions (hashing a code
# object hashes its bytecode: a few of them cost as much as the formatting saved). The code objects are
# kept with their text, so that no identity in a key is taken by another code object while it is cached.
_formatted: dict[tuple[int, ...], tuple[tuple[CodeType, ...], str]] = {}


def stack_trace(error: BaseException) -> str:
    """`error` formatted as `traceback.format_exception` does, from the innermost cause to `error`."""
    if error.__cause__ is None and (error.__context__ is None or error.__suppress_context__):
        return _alone(error)  # the common case
    chain: list[tuple[str, BaseException]] = []
    seen: set[int] = set()
    joint: str = ""  # the line that joins an exception to the one it led to
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append((joint, current))
        if current.__cause__ is not None:
            joint, current = CAUSE, current.__cause__
        elif current.__context__ is not None and not current.__suppress_context__:
            joint, current = CONTEXT, current.__context__
        else:
            current = None
    parts: list[str] = []
    for joint, exception in reversed(chain):
        parts.append(_alone(exception))
        parts.append(joint)
    return "".join(parts)


def _alone(error: BaseException) -> str:
    """`error`'s own part of a chain's trace."""
    if isinstance(error, BaseExceptionGroup):  # rare, and laid out as a tree: the library's own way
        return "".join(traceback.format_exception(error, chain=False))
    tb = error.__traceback__
    return _last_line(error) if tb is None else f"{HEAD}{_frames(tb)}{_last_line(error)}"


def _frames(tb: TracebackType) -> str:
    key: tuple[int, ...] = ()
    step: TracebackType | None = tb
    while step is not None:
        key += (id(step.tb_frame.f_code), step.tb_lasti)
        step = step.tb_next
    found = _formatted.get(key)
    if found is not None:
        return found[1]
    if len(_formatted) >= KEPT:
        _formatted.clear()
    frames = list(traceback.walk_tb(tb))
    text = "".join(traceback.StackSummary.extract(iter(frames), lookup_lines=True).format())
    _formatted[key] = (tuple(frame.f_code for frame, _ in frames), text)
    return text


def _last_line(error: BaseException) -> str:
    """The line `traceback.format_exception_only` gives an exception without notes that is no SyntaxError
    (whose lines show where in the source it is)."""
    if isinstance(error, SyntaxError) or getattr(error, "__notes__", None):
        return "".join(traceback.format_exception_only(error))
    kind = type(error)
    name = (
        kind.__qualname__ if kind.__module__ in ("__main__", "builtins") else f"{kind.__module__}.{kind.__qualname__}"
    )
    try:
        text = str(error)
    except Exception:
        text = "<exception str() failed>"
    return f"{name}: {text}\n" if text else f"{name}\n"
