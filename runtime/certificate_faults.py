"""A server's certificate that fails the client's verification, told as the cause and what to do about it, in
the words of the settings the user fixes it in: Kafka's brokers and the schema registry alike."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

# OpenSSL's verify codes (X509_V_ERR_*) of the faults told apart.
UNKNOWN_ISSUER = (2, 19, 20)
SELF_SIGNED = 18
NOT_YET_VALID = 9
EXPIRED = 10
HOSTNAME_MISMATCH = 62
IP_ADDRESS_MISMATCH = 64


@dataclass(frozen=True)
class CertificateChecks:
    """Where a client's certificate checks are set: its TLS settings' field, the server it verifies, and the
    settings that name the server's address."""

    tls_field: str
    server: str
    addressed_by: str

    def cause(self, error: ssl.SSLCertVerificationError) -> str:
        """OpenSSL's words for the fault, then the cause and its remedy."""
        return f"{error.verify_message}: {self._remedy(error.verify_code)}"

    def _remedy(self, code: int) -> str:
        if code in UNKNOWN_ISSUER:
            return (
                f"unknown CA: {self.tls_field}.ca_file (or, when it names none, the system's trust store) does not "
                "hold the CA that signed it"
            )
        if code == SELF_SIGNED:
            return f"unknown CA: the certificate is self-signed; name it, or its CA, in {self.tls_field}.ca_file"
        if code == NOT_YET_VALID:
            return "certificate not yet valid: check this machine's clock"
        if code == EXPIRED:
            return f"expired certificate: {self.server} must be given a new one (or this machine's clock is wrong)"
        if code == HOSTNAME_MISMATCH:
            return f"hostname mismatch: connect by a name the certificate holds ({self.addressed_by})"
        if code == IP_ADDRESS_MISMATCH:
            return (
                "hostname mismatch: the certificate does not hold this IP address; connect by a name it holds "
                f"({self.addressed_by})"
            )
        return f"check {self.tls_field}"
