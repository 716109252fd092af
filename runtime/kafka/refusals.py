"""A broker's refusal of a client's security (a certificate that fails verification, a refused login), and
what to do about each: retrying cannot help, so the runtime stops with one line naming the broker and the cause."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import TypeGuard

from aiokafka.errors import (
    AuthenticationFailedError,
    AuthenticationMethodNotSupported,
    IllegalSaslStateError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from runtime.certificate_faults import CertificateChecks
from stores.oauth_tokens import TokenRefused

REPORTED = "security_refusal_reported"
"""Set on the Kafka client's log record of a refusal the runtime reports itself: printed once, as its error."""

# What each refusal means for the app's kafka.security settings.
AUTHENTICATION_HINTS: dict[type[Exception], str] = {
    IllegalSaslStateError: "the listener does not expect SASL: is it PLAINTEXT or SSL while "
    "kafka.security.protocol is SASL_PLAINTEXT or SASL_SSL?",
    UnsupportedSaslMechanismError: "the listener does not enable kafka.security.sasl.mechanism",
    SaslAuthenticationFailed: "bad credentials: check kafka.security.sasl.username and password",
    AuthenticationFailedError: "bad credentials: check kafka.security.sasl.username and password",
    AuthenticationMethodNotSupported: "the listener does not enable kafka.security.sasl.mechanism",
    TokenRefused: "check kafka.security.sasl.oauth",
    ssl.SSLCertVerificationError: "the broker's certificate failed verification",
}
KAFKA_CERTIFICATES = CertificateChecks(
    "kafka.security.tls", "the broker", "kafka.bootstrap_servers, the broker's advertised listeners"
)


def is_refusal(error: object) -> TypeGuard[Exception]:
    return isinstance(error, tuple(AUTHENTICATION_HINTS))


def hint(refusal: Exception) -> str:
    if isinstance(refusal, ssl.SSLCertVerificationError):
        return KAFKA_CERTIFICATES.cause(refusal)
    return next(hint for kind, hint in AUTHENTICATION_HINTS.items() if isinstance(refusal, kind))


def describe(refusal: Exception) -> str:
    """The refusal without what the hint says again (OpenSSL's codes and source lines)."""
    if isinstance(refusal, ssl.SSLCertVerificationError):
        return "TLS handshake"
    return f"authentication ({refusal})"


@dataclass(frozen=True)
class Refusal:
    """A broker's refusal of a connection's security, and which broker it was."""

    address: str
    error: Exception
