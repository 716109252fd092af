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

CAUSE = b"\nThe above exception was the direct cause of the following exception:\n\n"
CONTEXT = b"\nDuring handling of the above exception, another exception occurred:\n\n"
HEAD = "Traceback (most recent call last):\n"
KEPT = 1024  # formatted paths; past that many, the cache starts over
# A path's frames, formatted and encoded, by the identities of its code objects and its instructions (hashing
# a code object hashes its bytecode: a few of them cost as much as the formatting saved). The code objects
# are kept with their text, so that no identity in a key is taken by another code object while it is cached.
_formatted: dict[tuple[int, ...], tuple[tuple[CodeType, ...], bytes]] = {}


def stack_trace(error: BaseException, text: bytes | None = None) -> bytes:
    """`error` formatted as `traceback.format_exception` does, from the innermost cause to `error`, in UTF-8;
    `text` is `error_text(error)` encoded, when the caller has it already (a dead letter's message)."""
    if error.__cause__ is None and (error.__context__ is None or error.__suppress_context__):
        return _alone(error, text)  # the common case
    chain: list[tuple[bytes, BaseException]] = []
    seen: set[int] = set()
    joint = b""  # the line that joins an exception to the one it led to
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
    parts: list[bytes] = []
    for joint, exception in reversed(chain):
        parts.append(_alone(exception, text if exception is error else None))
        parts.append(joint)
    return b"".join(parts)


def _alone(error: BaseException, text: bytes | None) -> bytes:
    """`error`'s own part of a chain's trace, joined from its frames and its last line in one copy."""
    if isinstance(error, BaseExceptionGroup):  # rare, and laid out as a tree: the library's own way
        return "".join(traceback.format_exception(error, chain=False)).encode()
    tb = error.__traceback__
    frames = b"" if tb is None else _frames(tb)
    head = _heads.get(type(error))
    if head is None or getattr(error, "__notes__", None):
        return frames + _last_line(error, text)
    if text is None:
        text = error_text(error).encode()
    return b"".join((frames, head, b": ", text, b"\n")) if text else b"".join((frames, head, b"\n"))


class _LastPath:
    """The path formatted last, checked before the cache: a processor failing on every record fails along one
    path, and comparing its frames' code objects and instructions by identity costs a third of building and
    hashing the cache's key."""

    __slots__ = ("steps", "text")

    def __init__(self) -> None:
        self.steps: list[tuple[CodeType, int]] = []
        self.text = b""


_last = _LastPath()


def _frames(tb: TracebackType) -> bytes:
    """The trace's head line and its frames."""
    step: TracebackType | None = tb
    for code, instruction in _last.steps:
        if step is None or step.tb_lasti != instruction or step.tb_frame.f_code is not code:
            break
        step = step.tb_next
    else:
        if step is None:
            return _last.text
    steps: list[tuple[CodeType, int]] = []
    step = tb
    while step is not None:
        steps.append((step.tb_frame.f_code, step.tb_lasti))
        step = step.tb_next
    key = tuple(number for code, instruction in steps for number in (id(code), instruction))
    found = _formatted.get(key)
    if found is None:
        if len(_formatted) >= KEPT:
            _formatted.clear()
        frames = traceback.StackSummary.extract(traceback.walk_tb(tb), lookup_lines=True).format()
        found = _formatted[key] = (tuple(code for code, _ in steps), (HEAD + "".join(frames)).encode())
    _last.steps, _last.text = steps, found[1]
    return found[1]


def error_text(error: BaseException) -> str:
    """`str(error)`, as a trace prints it when that fails."""
    try:
        return str(error)
    except Exception:
        return "<exception str() failed>"


def _last_line(error: BaseException, text: bytes | None) -> bytes:
    """The line `traceback.format_exception_only` gives an exception without notes that is no SyntaxError
    (whose lines show where in the source it is)."""
    kind = type(error)
    head = _heads.get(kind)
    if head is None:
        if issubclass(kind, SyntaxError):
            return "".join(traceback.format_exception_only(error)).encode()
        module, qualified = kind.__module__, kind.__qualname__
        head = _heads[kind] = (qualified if module in ("__main__", "builtins") else f"{module}.{qualified}").encode()
    if getattr(error, "__notes__", None):
        return "".join(traceback.format_exception_only(error)).encode()
    if text is None:
        text = error_text(error).encode()
    return b"".join((head, b": ", text, b"\n")) if text else head + b"\n"


# The exception types as the last line names them; SyntaxError's never kept.
_heads: dict[type[BaseException], bytes] = {}
