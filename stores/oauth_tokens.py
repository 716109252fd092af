"""Bearer tokens from an OpenID Connect provider by the client credentials grant: OAUTHBEARER's for aiokafka,
and the schema registry's."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from aiokafka.abc import AbstractTokenProvider
from aiokafka.errors import KafkaError

TOKEN_TIMEOUT_S = 10.0
# A token is fetched again once this share of its lifetime has passed, so none expires in a request.
TOKEN_REFRESH_SHARE = 0.8
DEFAULT_LIFETIME_S = 300.0


class TokenRefused(KafkaError):  # type: ignore[misc]
    """The OIDC provider gave no token for the client credentials: the server that wants it was never asked."""

    @property
    def reason(self) -> str:
        """The refusal in words, without the class name that KafkaError's str puts first."""
        return str(self.args[0])


class ClientCredentials:
    """Tokens from a token endpoint by the client credentials grant (RFC 6749 4.4), each kept until most of its
    lifetime has passed, so one fetch serves every caller of the process meanwhile. `token()` blocks while it
    fetches; a caller on an event loop takes `cached()` first, and fetches in a thread."""

    def __init__(self, token_endpoint: str, client_id: str, client_secret: str, scope: str | None) -> None:
        self._endpoint = token_endpoint
        self._client_id = client_id
        self._client_secret = client_secret
        self._scope = scope
        self._token: str | None = None
        self._renew_at = 0.0
        self._fetching = threading.Lock()

    def __repr__(self) -> str:
        return f"ClientCredentials({self._endpoint!r}, client_id={self._client_id!r})"

    def cached(self) -> str | None:
        """The token fetched last, while it is not yet due to be fetched again."""
        token = self._token
        return token if token is not None and time.monotonic() < self._renew_at else None

    def token(self) -> str:
        with self._fetching:
            cached = self.cached()
            if cached is not None:
                return cached
            fetched_at = time.monotonic()
            token, lifetime = self._fetch()
            self._token, self._renew_at = token, fetched_at + lifetime * TOKEN_REFRESH_SHARE
            return token

    def _fetch(self) -> tuple[str, float]:
        form = {"grant_type": "client_credentials", **({"scope": self._scope} if self._scope else {})}
        basic = f"{urllib.parse.quote(self._client_id)}:{urllib.parse.quote(self._client_secret)}"
        request = urllib.request.Request(
            self._endpoint,
            data=urllib.parse.urlencode(form).encode(),
            headers={
                "Authorization": f"Basic {base64.b64encode(basic.encode()).decode()}",
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
            },
        )
        where = f"the token endpoint {self._endpoint}"
        try:
            with urllib.request.urlopen(request, timeout=TOKEN_TIMEOUT_S) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise TokenRefused(f"{where} refused client {self._client_id}: HTTP {error.code}") from None
        except (urllib.error.URLError, OSError) as error:
            raise TokenRefused(f"{where} could not be reached: {getattr(error, 'reason', error)}") from None
        except ValueError:
            raise TokenRefused(f"{where} answered with no JSON") from None
        token = answer.get("access_token") if isinstance(answer, dict) else None
        if not isinstance(token, str) or not token:
            raise TokenRefused(f"{where} answered with no access_token")
        lifetime = answer.get("expires_in")
        return token, float(lifetime) if isinstance(lifetime, int | float) else DEFAULT_LIFETIME_S


class ClientCredentialsTokens(AbstractTokenProvider):  # type: ignore[misc]
    """aiokafka's OAUTHBEARER token provider: a fetch runs in a thread, so the event loop never waits for it."""

    def __init__(self, tokens: ClientCredentials) -> None:
        self._tokens = tokens

    def __repr__(self) -> str:
        return f"ClientCredentialsTokens({self._tokens!r})"

    async def token(self) -> str:
        cached = self._tokens.cached()
        return cached if cached is not None else await asyncio.to_thread(self._tokens.token)
