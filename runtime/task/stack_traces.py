"""A failed record's stack trace, as its dead letter carries it, at a cost a record can bear.

`traceback.format_exception` costs more than processing a record many times over: for every frame it
finds the instruction's position by walking the code's positions from the start, reads the source line,
and compiles it to point carets at the failing expression. A processor that fails on every record fails
the same way each time, so the frames of each traceback are formatted once per path through the code
(the code objects and instructions it passed) and kept; only the exception's own line is formatted each time,
and without `format_exception_only`, which takes in the whole chain of causes again for each line. The
trace reads as Python prints it, chained exceptions included, without the carets, and without the frame that
caught the error: that is the runtime's own (the record loop calling `process`, or decoding a record), the same
for every record, and it would tell a reader nothing while adding a frame to every trace.
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
    """`error`, as the runtime caught it, formatted as `traceback.format_exception` does from the innermost cause
    to `error`, in UTF-8, but from the frame below the one that caught it (when there is one: a cause's frames
    are all kept); `text` is `error_text(error)` encoded, when the caller has it already (a dead letter's
    message). The common case, one exception of a type seen before, without notes, raised along the path of the
    last one, is done here without a call."""
    head = _heads.get(error.__class__)  # never an exception group's, nor a SyntaxError's
    tb = error.__traceback__
    if tb is not None and tb.tb_next is not None:
        tb = tb.tb_next  # below the catcher
    if (
        head is None
        or tb is None
        or error.__cause__ is not None
        or (error.__context__ is not None and not error.__suppress_context__)
        or getattr(error, "__notes__", None)
    ):
        return _chained(error, text)
    step: TracebackType | None = tb
    for code, instruction in _last.steps:
        if step is None or step.tb_lasti != instruction or step.tb_frame.f_code is not code:
            frames = _frames(tb)
            break
        step = step.tb_next
    else:
        frames = _last.text if step is None else _frames(tb)
    if text is None:
        text = error_text(error).encode()
    return b"".join((frames, head, b": ", text, b"\n")) if text else b"".join((frames, head, b"\n"))


def _chained(error: BaseException, text: bytes | None) -> bytes:
    """`stack_trace` in general: a chain of causes, exception groups, notes, types not seen yet."""
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
        caught = exception is error
        parts.append(_alone(exception, text if caught else None, caught))
        parts.append(joint)
    return b"".join(parts)


def _alone(error: BaseException, text: bytes | None, caught: bool) -> bytes:
    """`error`'s own part of a chain's trace; `caught`: it is the error the runtime caught, whose first frame is
    left out. An exception group is laid out as a tree, every frame kept: the library's own way."""
    if isinstance(error, BaseExceptionGroup):
        return "".join(traceback.format_exception(error, chain=False)).encode()
    tb = error.__traceback__
    if caught and tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return (b"" if tb is None else _frames(tb)) + _last_line(error, text)


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
    """The trace's head line and its frames, along a path other than the last one."""
    steps: list[tuple[CodeType, int]] = []
    step: TracebackType | None = tb
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


UNPRINTABLE = "<exception str() failed>"  # what a trace prints of an exception whose `str()` fails


def error_text(error: BaseException) -> str:
    """`str(error)`, as a trace prints it when that fails."""
    try:
        return str(error)
    except Exception:
        return UNPRINTABLE


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
