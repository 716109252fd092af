"""`schema_registry`'s TLS and authentication: one way to authenticate, the header each way sends, tokens
fetched from a token endpoint, and each refusal (a certificate that fails verification, a client certificate
the registry requires, credentials it does not accept) as one line naming the registry and the cause, with no
secret in it. Against a local HTTPS server; tests/integration/test_registry_security.py has the real registry."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from runtime.config import ConfigError, parse_app
from runtime.config.schema_registry import SchemaRegistryConfig
from runtime.devkafka.certificates import Certificates, make_certificates
from runtime.schema_registry.client import RegistryClient, RegistryRefused
from tests.support.https_registry import https_registry
from tests.support.token_endpoint import token_endpoint

SUBJECT = "payments-value"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


def app(registry: dict[str, Any]) -> dict[str, Any]:
    return {
        "app_id": "shop",
        "topics": {"payments": {}},
        "processors": [{"name": "p", "class": "processors:Processor", "inputs": ["payments"]}],
        "schema_registry": registry,
    }


@pytest.mark.parametrize(
    ("registry", "message"),
    [
        ({"url": "https://r", "username": "u", "password": "pw-1234", "token": "tk-5678"},
         "schema_registry: username and password and token given: authenticate one way only"),
        ({"url": "https://r", "token": "tk-5678", "oauth": {"token_endpoint": "https://idp/token", "client_id": "a",
                                                            "client_secret": "cs-9012"}},
         "schema_registry: token and oauth given: authenticate one way only"),
        ({"url": "https://r", "password": "pw-1234"}, "schema_registry: password needs username"),
        ({"url": "http://r", "tls": {}}, "schema_registry: tls is for an https:// url"),
        ({"url": "https://r", "tls": {"ca_file": "/nowhere.pem"}}, "schema_registry.tls.ca_file: Path does not point"),
    ],
)  # fmt: skip
def test_mistakes_name_their_field(registry: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_app(app(registry))
    assert str(error.value).startswith(message)
    assert not any(secret in str(error.value) for secret in ("pw-1234", "tk-5678", "cs-9012"))


def test_a_client_key_its_password_does_not_open_is_a_config_error(certificates: Certificates) -> None:
    tls = {"cert_file": str(certificates.client_cert_file), "key_file": str(certificates.client_key_file),
           "key_password": "not-the-password"}  # fmt: skip
    with pytest.raises(ConfigError, match=r"^schema_registry: tls: the client certificate .* cannot be loaded"):
        parse_app(app({"url": "https://registry:8081", "tls": tls}))


def client(url: str, certificates: Certificates, **settings: Any) -> RegistryClient:
    return RegistryClient(
        SchemaRegistryConfig.model_validate({"url": url, "tls": {"ca_file": str(certificates.ca_file)}, **settings})
    )


def test_each_way_to_authenticate_sends_its_header(certificates: Certificates) -> None:
    with (
        https_registry(certificates.pem("broker").cert_file, certificates.pem("broker").key_file) as registry,
        token_endpoint({"payments": "cs-3344"}, lifetime_s=3600) as endpoint,
    ):
        oauth = {"token_endpoint": endpoint.url, "client_id": "payments", "client_secret": "cs-3344"}
        for settings in ({}, {"username": "payments", "password": "pw-1234"}, {"token": "tk-5678"}, {"oauth": oauth}):
            registered = client(registry.url, certificates, **settings).latest(SUBJECT)
            assert registered.schema_id == 7
        fetched = client(registry.url, certificates, oauth=oauth)
        fetched.latest(SUBJECT)
        fetched.latest("orders-value")
    basic = "Basic " + base64.b64encode(b"payments:pw-1234").decode()
    (token_of_the_first, token_of_the_second) = [auth for auth in registry.authorizations[3:] if auth][0:2]
    assert registry.authorizations[:3] == [None, basic, "Bearer tk-5678"]
    assert token_of_the_first.startswith("Bearer ") and token_of_the_second.startswith("Bearer ")
    assert len(endpoint.requests) == 2, "one token per client, kept for its requests while it is fresh"
    assert registry.authorizations[4] == registry.authorizations[5]


@pytest.mark.parametrize(
    ("token", "cause"),
    [
        ("unknown", "401 refused: bad credentials: check schema_registry.token"),
        ("not-granted", "403 refused: the registry does not grant it to schema_registry.token"),
    ],
)
def test_credentials_the_registry_refuses_are_named_without_the_secret(
    certificates: Certificates, token: str, cause: str
) -> None:
    with (
        https_registry(certificates.pem("broker").cert_file, certificates.pem("broker").key_file) as registry,
        pytest.raises(RegistryRefused) as refused,
    ):
        client(registry.url, certificates, token=token).latest(SUBJECT)
    assert str(refused.value) == f"the schema registry at {registry.url} refused GET for subject {SUBJECT}: {cause}"


def test_a_token_endpoint_that_refuses_the_client_stops_before_the_registry_is_asked(
    certificates: Certificates,
) -> None:
    with (
        https_registry(certificates.pem("broker").cert_file, certificates.pem("broker").key_file) as registry,
        token_endpoint({"payments": "the-right-secret"}) as endpoint,
    ):
        oauth = {"token_endpoint": endpoint.url, "client_id": "payments", "client_secret": "a-wrong-secret"}
        with pytest.raises(RegistryRefused) as refused:
            client(registry.url, certificates, oauth=oauth).latest(SUBJECT)
    assert str(refused.value) == (
        f"the schema registry at {registry.url} was not asked: the token endpoint {endpoint.url} refused client "
        "payments: HTTP 401: check schema_registry.oauth"
    )
    assert registry.authorizations == []


@pytest.mark.parametrize(
    ("served", "cause"),
    [
        ("expired", "certificate has expired: expired certificate: the registry must be given a new one (or this "
                    "machine's clock is wrong)"),
        ("wrong-host", "IP address mismatch, certificate is not valid for '127.0.0.1'.: hostname mismatch: the "
                       "certificate does not hold this IP address; connect by a name it holds (schema_registry.url)"),
        ("other-ca", "self-signed certificate: unknown CA: the certificate is self-signed; name it, or its CA, in "
                     "schema_registry.tls.ca_file"),
    ],
)  # fmt: skip
def test_a_certificate_that_fails_verification_is_refused_naming_the_cause(
    certificates: Certificates, served: str, cause: str
) -> None:
    directory = certificates.directory
    with (
        https_registry(directory / f"{served}.pem", directory / f"{served}.key") as registry,
        pytest.raises(RegistryRefused) as refused,
    ):
        client(registry.url, certificates).latest(SUBJECT)
    assert str(refused.value) == f"the schema registry at {registry.url} failed the TLS handshake: {cause}"


def test_a_registry_that_requires_a_client_certificate_takes_the_configured_one(certificates: Certificates) -> None:
    with https_registry(
        certificates.pem("broker").cert_file, certificates.pem("broker").key_file, client_ca=certificates.ca_file
    ) as registry:
        mutual = {
            "ca_file": str(certificates.ca_file),
            "cert_file": str(certificates.client_cert_file),
            "key_file": str(certificates.client_key_file),
            "key_password": certificates.client_key_password,
        }
        assert client(registry.url, certificates, tls=mutual).latest(SUBJECT).schema_id == 7
        with pytest.raises(RegistryRefused) as refused:
            client(registry.url, certificates).latest(SUBJECT)
    assert str(refused.value).startswith(f"the schema registry at {registry.url} failed the TLS handshake (")
    assert str(refused.value).endswith("): check schema_registry.url (https://) and schema_registry.tls")
