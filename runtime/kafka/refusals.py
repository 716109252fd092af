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
# The certificate's faults, by OpenSSL's verify code (X509_V_ERR_*): what to do about each.
CERTIFICATE_HINTS: dict[int, str] = {
    2: "unknown CA: kafka.security.tls.ca_file (or, when it names none, the system's trust store) does not "
    "hold the CA that signed it",
    18: "unknown CA: the certificate is self-signed; name it, or its CA, in kafka.security.tls.ca_file",
    19: "unknown CA: kafka.security.tls.ca_file (or, when it names none, the system's trust store) does not "
    "hold the CA that signed it",
    20: "unknown CA: kafka.security.tls.ca_file (or, when it names none, the system's trust store) does not "
    "hold the CA that signed it",
    9: "certificate not yet valid: check this machine's clock",
    10: "expired certificate: the broker must be given a new one (or this machine's clock is wrong)",
    62: "hostname mismatch: connect by a name the certificate holds (kafka.bootstrap_servers, the broker's "
    "advertised listeners)",
    64: "hostname mismatch: the certificate does not hold this IP address; connect by a name it holds "
    "(kafka.bootstrap_servers, the broker's advertised listeners)",
}


def is_refusal(error: object) -> TypeGuard[Exception]:
    return isinstance(error, tuple(AUTHENTICATION_HINTS))


def hint(refusal: Exception) -> str:
    if isinstance(refusal, ssl.SSLCertVerificationError):
        cause = CERTIFICATE_HINTS.get(refusal.verify_code, "check kafka.security.tls")
        return f"{refusal.verify_message}: {cause}"
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
