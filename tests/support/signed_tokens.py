"""Bearer tokens a test's schema registry verifies: JWTs signed (RS256) by an RSA key made for the test, whose
public key the registry is started with, so no OIDC server is needed to check them."""

from __future__ import annotations

import base64
import json
import time

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa


def _part(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenSigner:
    def __init__(self) -> None:
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    @property
    def public_key(self) -> str:
        """The public key as Quarkus's `quarkus.oidc.public-key` takes it: its DER, in base64."""
        der = self._key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return base64.b64encode(der).decode()

    def token(self, subject: str, lifetime_s: int) -> str:
        now = int(time.time())
        header = _part(json.dumps({"alg": "RS256", "typ": "JWT"}).encode())
        claims = _part(json.dumps({"sub": subject, "iat": now, "exp": now + lifetime_s}).encode())
        signature = self._key.sign(f"{header}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{header}.{claims}.{_part(signature)}"
