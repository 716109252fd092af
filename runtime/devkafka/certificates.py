"""A throwaway certificate authority and the certificates a secured local broker and its clients use.

Made by `openssl` at run time, so no key is ever committed: a CA, the broker's certificate for
127.0.0.1 and localhost (a PKCS12 keystore, as Java reads it, and PEM, as other servers read it: a test's
schema registry and the local PostgreSQL serve it too), a client's certificate for mutual TLS (PEM, its key
encrypted, as Python reads it), and two certificates that must fail a client's checks: one for another host
name and one already expired (each in PEM and PKCS12).
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runtime.devkafka.jars import DevKafkaError, require_tool

BROKER_NAMES = "subjectAltName=IP:127.0.0.1,DNS:localhost"
WRONG_HOST_NAMES = "subjectAltName=DNS:wrong-host.invalid"


# The broker's certificate for 127.0.0.1 and localhost, and the two that must fail a client's checks.
ServerCertificate = Literal["broker", "wrong-host", "expired"]


@dataclass(frozen=True)
class Pem:
    """A certificate and its key (unencrypted), PEM files."""

    cert_file: Path
    key_file: Path


@dataclass(frozen=True)
class Certificates:
    """Paths of the generated files, and the passwords that open them."""

    directory: Path
    keystore_password: str
    client_key_password: str

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def broker_keystore(self) -> Path:
        return self.directory / "broker.p12"

    def pem(self, name: ServerCertificate) -> Pem:
        """One of the broker's certificates as PEM, for a server that reads PEM (a schema registry, PostgreSQL)."""
        return Pem(self.directory / f"{name}.pem", self.directory / f"{name}.key")

    @property
    def wrong_host_keystore(self) -> Path:
        return self.directory / "wrong-host.p12"

    @property
    def expired_keystore(self) -> Path:
        return self.directory / "expired.p12"

    @property
    def client_cert_file(self) -> Path:
        return self.directory / "client.pem"

    @property
    def client_key_file(self) -> Path:
        return self.directory / "client.key"

    @property
    def other_ca_file(self) -> Path:
        """A CA that signed none of the broker's certificates: trusting only it must fail."""
        return self.directory / "other-ca.pem"


def _openssl(*args: str) -> None:
    result = subprocess.run([require_tool("openssl"), *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise DevKafkaError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def _make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "30",
        "-subj",
        f"/CN=dev-kafka {name}",
        "-keyout",
        str(key),
        "-out",
        str(cert),
    )
    return cert, key


def _sign(directory: Path, name: str, common_name: str, extension: str | None, days: int) -> tuple[Path, Path]:
    """A key and a certificate for it signed by the CA; `days` of -1 makes one that expired yesterday."""
    key, request, cert = directory / f"{name}.key", directory / f"{name}.csr", directory / f"{name}.pem"
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={common_name}", "-keyout", str(key), "-out", str(request)
    )
    extensions = directory / f"{name}.ext"
    extensions.write_text(f"{extension}\n" if extension else "")
    _openssl(
        "x509",
        "-req",
        "-in",
        str(request),
        "-CA",
        str(directory / "ca.pem"),
        "-CAkey",
        str(directory / "ca.key"),
        "-CAcreateserial",
        "-days",
        str(days),
        "-extfile",
        str(extensions),
        "-out",
        str(cert),
    )
    request.unlink()
    extensions.unlink()
    return cert, key


def _keystore(directory: Path, name: str, password: str) -> None:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    _openssl(
        "pkcs12",
        "-export",
        "-in",
        str(cert),
        "-inkey",
        str(key),
        "-certfile",
        str(directory / "ca.pem"),
        "-name",
        name,
        "-passout",
        f"pass:{password}",
        "-out",
        str(directory / f"{name}.p12"),
    )


def make_certificates(directory: Path) -> Certificates:
    """Generate every file once into `directory`; later calls find them there."""
    directory.mkdir(parents=True, exist_ok=True)
    passwords = directory / "passwords"
    if passwords.exists():
        keystore_password, client_key_password = passwords.read_text().split()
        return Certificates(directory, keystore_password, client_key_password)
    keystore_password, client_key_password = secrets.token_hex(12), secrets.token_hex(12)
    _make_ca(directory, "ca")
    _make_ca(directory, "other-ca")
    for name, common_name, extension, days in (
        ("broker", "localhost", BROKER_NAMES, 30),
        ("wrong-host", "wrong-host.invalid", WRONG_HOST_NAMES, 30),
        ("expired", "localhost", BROKER_NAMES, -1),
    ):
        _sign(directory, name, common_name, extension, days)
        _keystore(directory, name, keystore_password)
    _sign(directory, "client", "client", None, 30)
    plain_key = (directory / "client.key").rename(directory / "client-plain.key")
    _openssl(
        "pkey",
        "-in",
        str(plain_key),
        "-aes256",
        "-passout",
        f"pass:{client_key_password}",
        "-out",
        str(directory / "client.key"),
    )
    plain_key.unlink()
    passwords.write_text(f"{keystore_password} {client_key_password}\n")
    return Certificates(directory, keystore_password, client_key_password)
