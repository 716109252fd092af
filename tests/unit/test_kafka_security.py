"""`kafka.security` made into aiokafka's options: one TLS context, SASL credentials, and OAUTHBEARER tokens
fetched from a real (local) token endpoint and kept until most of their lifetime has passed."""

from __future__ import annotations

import asyncio
import pickle
import ssl
import time

import pytest
from pydantic import ValidationError

from runtime.config import ConfigError
from runtime.devkafka.certificates import Certificates, make_certificates
from runtime.kafka.security import client_security
from stores.kafka_security import KafkaSecurity
from stores.oauth_tokens import TOKEN_REFRESH_SHARE, ClientCredentials, ClientCredentialsTokens, TokenRefused
from tests.support.token_endpoint import token_endpoint


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


def test_plaintext_takes_no_context_and_no_credentials() -> None:
    assert client_security(KafkaSecurity()) == {"security_protocol": "PLAINTEXT"}


def test_sasl_ssl_gets_a_verifying_context_and_the_password(certificates: Certificates) -> None:
    security = KafkaSecurity.model_validate({
        "protocol": "SASL_SSL",
        "tls": {"ca_file": str(certificates.ca_file)},
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": "alice", "password": "pw-4411"},
    })  # fmt: skip
    options = client_security(security)
    context = options.pop("ssl_context")
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert options == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "pw-4411",
    }
    assert "pw-4411" not in repr(security)


def test_a_client_key_with_the_wrong_password_is_a_config_error(certificates: Certificates) -> None:
    security = KafkaSecurity.model_validate({
        "protocol": "SSL",
        "tls": {"cert_file": str(certificates.client_cert_file), "key_file": str(certificates.client_key_file),
                "key_password": "not-the-password"},
    })  # fmt: skip
    with pytest.raises(ConfigError, match=r"kafka\.security\.tls: the client certificate .* cannot be loaded"):
        client_security(security)


def test_a_key_without_its_certificate_is_refused(certificates: Certificates) -> None:
    with pytest.raises(ValidationError, match="set cert_file too"):
        KafkaSecurity.model_validate({"protocol": "SSL", "tls": {"key_file": str(certificates.client_key_file)}})


def _provider(url: str, secret: str = "secret-77a1") -> ClientCredentialsTokens:
    return ClientCredentialsTokens(ClientCredentials(url, "app", secret, None))


async def _tokens(provider: ClientCredentialsTokens, count: int) -> list[str]:
    return list(await asyncio.gather(*(provider.token() for _ in range(count))))


def test_a_token_is_fetched_once_and_shared_until_it_is_due_again() -> None:
    with token_endpoint({"app": "secret-77a1"}, lifetime_s=1) as endpoint:
        provider = _provider(endpoint.url)
        first = asyncio.run(_tokens(provider, 5))
        assert len(set(first)) == 1 and len(endpoint.requests) == 1
        time.sleep(TOKEN_REFRESH_SHARE * 1 + 0.1)  # most of its one second has passed
        asyncio.run(provider.token())
        assert len(endpoint.requests) == 2
    assert endpoint.requests[0] == {"grant_type": "client_credentials"}


def test_a_refused_client_is_a_token_refusal_without_the_secret() -> None:
    with token_endpoint({"app": "the-right-secret"}) as endpoint:
        provider = _provider(endpoint.url, "a-wrong-secret-19")
        with pytest.raises(TokenRefused) as refused:
            asyncio.run(provider.token())
    assert f"the token endpoint {endpoint.url} refused client app: HTTP 401" in str(refused.value)
    assert "a-wrong-secret-19" not in str(refused.value)


def test_an_unreachable_endpoint_is_a_token_refusal() -> None:
    with token_endpoint({}) as endpoint:
        url = endpoint.url
    provider = _provider(url)  # the server is gone: its port refuses
    with pytest.raises(TokenRefused, match="could not be reached"):
        asyncio.run(provider.token())


def test_the_settings_reach_a_reader_process_in_a_pickle_and_make_its_context_there(
    certificates: Certificates,
) -> None:
    """A global store's reader is handed the settings, not the context (which no pickle can carry)."""
    security = KafkaSecurity.model_validate({
        "protocol": "SASL_SSL",
        "tls": {"ca_file": str(certificates.ca_file)},
        "sasl": {"mechanism": "SCRAM-SHA-256", "username": "alice", "password": "pw-0d9c"},
    })  # fmt: skip
    carried = pickle.loads(pickle.dumps(security))
    assert carried == security
    assert client_security(carried)["sasl_plain_password"] == "pw-0d9c"
