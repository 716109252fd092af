"""Secrets kept out of every message the runtime prints or logs.

Two kinds are hidden: credentials written into addresses (`user:pass@host`, `?token=...`), which
are recognised by their shape wherever they appear, and values the config marks as secret (those
of keys that look like passwords, tokens or keys, and every `${VAR}` substitution), which are
remembered when the YAML is loaded and hidden wherever they appear later, aiokafka's log lines
included.
"""

from __future__ import annotations

import logging
import re
import threading

MASK = "***"
# Shorter values are too likely to be an ordinary word or number of the message to be hidden in it.
MIN_SECRET_LENGTH = 4

SECRET_KEY = re.compile(r"pass(word|wd)?|secret|token|credential|(api|access|private|signing)[_.-]?key", re.I)
# `user:password@` or `token@` after `//`, and `user:password@` in a bare `host:port` list.
USERINFO = re.compile(r"(?<=//)[^\s/@'\"]+@|(?<![\w.:/-])[^\s:/@'\",]+:[^\s/@'\",]+@(?=[\w\[])")
SECRET_PARAMETER = re.compile(
    r"(?P<name>[?&;](?:[^=&\s'\"]*(?:pass|secret|token|signature|credential|key)[^=&\s'\"]*)=)[^&\s'\"]+", re.I
)

_remembered: set[str] = set()
_lock = threading.Lock()


def looks_secret(key: str) -> bool:
    """Keys like sasl_plain_password, ssl_password, api_key, auth_token."""
    return SECRET_KEY.search(key) is not None


def remember(value: str) -> None:
    """Hide `value` from every later message (a substituted variable, a password option)."""
    if len(value) >= MIN_SECRET_LENGTH:
        with _lock:
            _remembered.add(value)


def redact(text: str) -> str:
    text = USERINFO.sub(f"{MASK}@", text)
    text = SECRET_PARAMETER.sub(lambda match: f"{match['name']}{MASK}", text)
    with _lock:
        secrets = sorted(_remembered, key=len, reverse=True)  # a secret that contains another goes first
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


class RedactingFilter(logging.Filter):
    """On a handler, so records propagated from every logger (aiokafka's included) pass through it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


def install(handlers: list[logging.Handler]) -> None:
    for handler in handlers:
        handler.addFilter(RedactingFilter())
