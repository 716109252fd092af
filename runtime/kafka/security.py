"""aiokafka's security options made from `kafka.security`: the same for every client the runtime builds.

The `ssl.SSLContext` and the OAUTHBEARER token provider are objects no process can be handed in a
pickle, so a process that needs a client (a global store's reader) is given the `KafkaSecurity`
settings and makes its own with `client_security`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from aiokafka.abc import AbstractTokenProvider
from aiokafka.errors import KafkaError

from runtime.config import ConfigError
from runtime.config.kafka_security import KafkaSecurity, Mechanism, OAuthConfig, TlsConfig

TOKEN_TIMEOUT_S = 10.0
# A token is fetched again once this share of its lifetime has passed, so none expires in a request.
TOKEN_REFRESH_SHARE = 0.8


class TokenRefused(KafkaError):  # type: ignore[misc]
    """The OIDC provider gave no token for the client credentials: the broker was never asked."""


def client_security(security: KafkaSecurity) -> dict[str, Any]:
    """The keyword arguments every aiokafka client gets for `security`."""
    options: dict[str, Any] = {"security_protocol": security.protocol.value}
    if security.protocol.uses_tls:
        options["ssl_context"] = ssl_context(security.tls or TlsConfig())
    sasl = security.sasl
    if sasl is not None:
        options["sasl_mechanism"] = sasl.mechanism.value
        if sasl.mechanism is Mechanism.OAUTHBEARER:
            assert sasl.oauth is not None  # the model requires it
            options["sasl_oauth_token_provider"] = ClientCredentialsTokens(sasl.oauth)
        elif sasl.mechanism is Mechanism.GSSAPI:
            options["sasl_kerberos_service_name"] = sasl.kerberos_service_name
            options["sasl_kerberos_domain_name"] = sasl.kerberos_domain_name
        else:
            assert sasl.password is not None  # the model requires it
            options["sasl_plain_username"] = sasl.username
            options["sasl_plain_password"] = sasl.password.get_secret_value()
    return options


def ssl_context(tls: TlsConfig) -> ssl.SSLContext:
    """Verifies the broker's certificate against `ca_file` (else the system's trust store) and, unless
    `check_hostname` is off, that it is for the host connected to; presents the client certificate if any."""
    try:
        context = ssl.create_default_context(cafile=str(tls.ca_file) if tls.ca_file else None)
    except ssl.SSLError as error:
        raise ConfigError(
            f"kafka.security.tls.ca_file: {tls.ca_file} holds no CA certificate ({error.reason})"
        ) from None
    context.check_hostname = tls.check_hostname
    if tls.cert_file is not None:
        password = tls.key_password.get_secret_value() if tls.key_password else None
        try:
            context.load_cert_chain(str(tls.cert_file), str(tls.key_file) if tls.key_file else None, password)
        except ssl.SSLError as error:
            raise ConfigError(
                f"kafka.security.tls: the client certificate {tls.cert_file} and its key cannot be loaded "
                f"({error.reason}): is key_file its key, and key_password the key's password?"
            ) from None
    return context


class ClientCredentialsTokens(AbstractTokenProvider):  # type: ignore[misc]
    """OAUTHBEARER tokens from an OIDC provider's token endpoint by the client credentials grant (RFC 6749
    4.4), each kept until most of its lifetime has passed, so one fetch serves every connection meanwhile."""

    def __init__(self, oauth: OAuthConfig) -> None:
        self._oauth = oauth
        self._token: str | None = None
        self._renew_at = 0.0
        self._fetching = asyncio.Lock()

    async def token(self) -> str:
        async with self._fetching:
            if self._token is not None and time.monotonic() < self._renew_at:
                return self._token
            fetched_at = time.monotonic()
            token, lifetime = await asyncio.to_thread(self._fetch)
            self._token, self._renew_at = token, fetched_at + lifetime * TOKEN_REFRESH_SHARE
            return token

    def _fetch(self) -> tuple[str, float]:
        oauth = self._oauth
        form = {"grant_type": "client_credentials", **({"scope": oauth.scope} if oauth.scope else {})}
        basic = f"{urllib.parse.quote(oauth.client_id)}:{urllib.parse.quote(oauth.client_secret.get_secret_value())}"
        request = urllib.request.Request(
            str(oauth.token_endpoint),
            data=urllib.parse.urlencode(form).encode(),
            headers={
                "Authorization": f"Basic {base64.b64encode(basic.encode()).decode()}",
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
            },
        )
        where = f"the token endpoint {oauth.token_endpoint}"
        try:
            with urllib.request.urlopen(request, timeout=TOKEN_TIMEOUT_S) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise TokenRefused(f"{where} refused client {oauth.client_id}: HTTP {error.code}") from None
        except (urllib.error.URLError, OSError) as error:
            raise TokenRefused(f"{where} could not be reached: {getattr(error, 'reason', error)}") from None
        except ValueError:
            raise TokenRefused(f"{where} answered with no JSON") from None
        token = answer.get("access_token") if isinstance(answer, dict) else None
        if not isinstance(token, str) or not token:
            raise TokenRefused(f"{where} answered with no access_token")
        lifetime = answer.get("expires_in", 300)
        return token, float(lifetime) if isinstance(lifetime, int | float) else 300.0
