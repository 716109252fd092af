"""What a request to the schema registry authenticates with: `schema_registry`'s username and password, its
token, or tokens fetched from its OIDC token endpoint; and the field a refusal of them points to."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Protocol

from runtime.config.schema_registry import SchemaRegistryConfig
from stores.oauth_tokens import ClientCredentials


class Credentials(Protocol):
    @property
    def field(self) -> str:
        """The settings to check when the registry refuses them."""
        ...

    def authorization(self) -> str | None:
        """The Authorization header's value; fetching a token may raise `TokenRefused`."""
        ...


@dataclass(frozen=True)
class Anonymous:
    field: str = "schema_registry.username and password, token or oauth"

    def authorization(self) -> None:
        return None


@dataclass(frozen=True, repr=False)
class Fixed:
    """A header that stays the same: the username and password, or the token, of the YAML."""

    header: str
    field: str

    def authorization(self) -> str:
        return self.header


@dataclass(frozen=True)
class FetchedTokens:
    """Each request takes the token kept, fetched again once most of its lifetime has passed."""

    tokens: ClientCredentials
    field: str = "schema_registry.oauth"

    def authorization(self) -> str:
        return f"Bearer {self.tokens.token()}"


def credentials(config: SchemaRegistryConfig) -> Credentials:
    if config.oauth is not None:
        return FetchedTokens(config.oauth.tokens())
    if config.token is not None:
        return Fixed(f"Bearer {config.token.get_secret_value()}", "schema_registry.token")
    if config.username is not None:
        password = config.password.get_secret_value() if config.password else ""
        pair = base64.b64encode(f"{config.username}:{password}".encode()).decode()
        return Fixed(f"Basic {pair}", "schema_registry.username and password")
    return Anonymous()
