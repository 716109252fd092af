"""Secrets stay out of messages: credentials by their shape, and the values the config marks as secret."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from runtime.config import parse_app
from runtime.redaction import MASK, redact
from tests.support.config_cli import REPO
from tests.unit.test_config_cli import VALID


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("cannot reach Kafka at user:pa55word@10.0.0.1:9092,ops:pw2@h2:9092 for the consumer",
         f"cannot reach Kafka at {MASK}@10.0.0.1:9092,{MASK}@h2:9092 for the consumer"),
        ("'s3://AKIA:wJalr@bucket/x' is a URL", f"'s3://{MASK}@bucket/x' is a URL"),
        ("https://token@host/x?X-Amz-Signature=abc&part=1&access_token=zz",
         f"https://{MASK}@host/x?X-Amz-Signature={MASK}&part=1&access_token={MASK}"),
        ("processors[0].class: cannot import 'a.b:C' at 12:00", "processors[0].class: cannot import 'a.b:C' at 12:00"),
    ],
)  # fmt: skip
def test_credentials_are_recognised_by_their_shape(text: str, redacted: str) -> None:
    assert redact(text) == redacted


def test_values_of_secret_keys_and_substitutions_are_hidden_once_the_config_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REDACTION_TEST_TOKEN", "tok-5f1e9a")
    app = copy.deepcopy(VALID)
    sasl = {"mechanism": "PLAIN", "username": "u", "password": "pw-8c2d41"}
    app["kafka"]["security"] = {"protocol": "SASL_SSL", "sasl": sasl}
    app["processors"][0]["params"] = {"api_key": "key-77ab03", "auth": "${REDACTION_TEST_TOKEN}", "limit": "1000"}
    app["topics"]["out"]["config"] = {"ssl.truststore.password": "ts-93kd02"}
    parse_app(app)
    message = "pw-8c2d41 key-77ab03 tok-5f1e9a ts-93kd02 limit 1000"
    assert redact(message) == f"{MASK} {MASK} {MASK} {MASK} limit 1000"


def test_the_command_line_log_redacts_what_aiokafka_logs() -> None:
    """aiokafka echoes the bootstrap servers in its own errors: the filter sits on the handler."""
    script = (
        "import logging\n"
        "from runtime.cli import configure_logging\n"
        "configure_logging('INFO')\n"
        "logging.getLogger('aiokafka').error('Unable connect to \"%s\": %s', 'ops:pa55word@broker:9092', "
        "OSError('refused'))\n"
        "try:\n    raise ValueError('bad ops:pa55word@broker:9092')\n"
        "except ValueError:\n    logging.getLogger('runtime').exception('failed')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                            check=True)  # fmt: skip
    assert f'Unable connect to "{MASK}@broker:9092": refused' in result.stderr
    assert f"ValueError: bad {MASK}@broker:9092" in result.stderr
    assert "pa55word" not in result.stderr
