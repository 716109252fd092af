"""How a client reaches a secured cluster (TLS, SASL, OAUTHBEARER): the app YAML's `kafka.security`, shared
by the engine's clients and the Spark jobs', and made into aiokafka's options.

aiokafka takes TLS as an `ssl.SSLContext` and OAUTHBEARER as a token provider object, which YAML
cannot express: these settings say what they are made from, and `aiokafka_options` makes them. The
context and the provider are objects no process can be handed in a pickle, so a process that needs
a client (a global store's reader) is given the settings and makes its own.
"""

from __future__ import annotations

import ssl
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, FilePath, HttpUrl, SecretStr, field_validator, model_validator

from stores.oauth_tokens import ClientCredentials, ClientCredentialsTokens


class TlsFilesRefused(ValueError):
    """A CA file, client certificate or key that cannot be loaded (not PEM, or the wrong key password)."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Protocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (Protocol.SSL, Protocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (Protocol.SASL_PLAINTEXT, Protocol.SASL_SSL)


class Mechanism(StrEnum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"
    OAUTHBEARER = "OAUTHBEARER"
    GSSAPI = "GSSAPI"


class TlsConfig(Strict):
    """The CA the broker's certificate must chain to (the system's trust store when none is named), and a
    client certificate for brokers that require one (mutual TLS)."""

    ca_file: FilePath | None = None
    cert_file: FilePath | None = None
    key_file: FilePath | None = None
    key_password: SecretStr | None = None
    check_hostname: bool = True

    @model_validator(mode="after")
    def _key_with_its_certificate(self) -> TlsConfig:
        if (self.key_file is not None or self.key_password is not None) and self.cert_file is None:
            raise ValueError("key_file and key_password belong to a client certificate: set cert_file too")
        return self


class OAuthConfig(Strict):
    """An OIDC provider's token endpoint, from which tokens are fetched by the client credentials grant."""

    token_endpoint: HttpUrl
    client_id: str
    client_secret: SecretStr
    scope: str | None = None

    @field_validator("token_endpoint")
    @classmethod
    def _no_credentials_in_the_url(cls, url: HttpUrl) -> HttpUrl:
        """The endpoint is named in messages (a refused token); its credentials belong in the secret."""
        if url.username is not None or url.password is not None:
            raise ValueError("the URL holds credentials: give them as client_id and client_secret")
        return url

    def tokens(self) -> ClientCredentials:
        """A fetcher of its own: one per client, as each client has one TLS context."""
        return ClientCredentials(
            str(self.token_endpoint), self.client_id, self.client_secret.get_secret_value(), self.scope
        )


class SaslConfig(Strict):
    """A user name and password for PLAIN and SCRAM, `oauth` for OAUTHBEARER, a Kerberos ticket for GSSAPI."""

    mechanism: Mechanism
    username: str | None = None
    password: SecretStr | None = None
    oauth: OAuthConfig | None = None
    kerberos_service_name: str = "kafka"
    kerberos_domain_name: str | None = None

    @model_validator(mode="after")
    def _credentials_of_the_mechanism(self) -> SaslConfig:
        has_password = self.username is not None or self.password is not None
        if self.mechanism is Mechanism.OAUTHBEARER:
            if self.oauth is None:
                raise ValueError(
                    "OAUTHBEARER takes its tokens from oauth: set oauth.token_endpoint, client_id and client_secret"
                )
            if has_password:
                raise ValueError("OAUTHBEARER takes no username or password: its credentials are under oauth")
        elif self.mechanism is Mechanism.GSSAPI:
            if has_password or self.oauth is not None:
                raise ValueError("GSSAPI takes its credentials from the Kerberos ticket cache, not the YAML")
        else:
            if self.username is None or self.password is None:
                raise ValueError(f"{self.mechanism} needs username and password")
            if self.oauth is not None:
                raise ValueError(f"oauth is for OAUTHBEARER, not {self.mechanism}")
        return self


class KafkaSecurity(Strict):
    """The listener's protocol, and what it asks of the client: TLS settings, SASL credentials."""

    protocol: Protocol = Protocol.PLAINTEXT
    tls: TlsConfig | None = None
    sasl: SaslConfig | None = None

    @model_validator(mode="after")
    def _settings_of_the_protocol(self) -> KafkaSecurity:
        if self.tls is not None and not self.protocol.uses_tls:
            raise ValueError(f"tls is for the protocols SSL and SASL_SSL, not {self.protocol}")
        if self.protocol.uses_sasl and self.sasl is None:
            raise ValueError(f"{self.protocol} needs sasl (mechanism and its credentials)")
        if self.sasl is not None and not self.protocol.uses_sasl:
            raise ValueError(f"sasl is for the protocols SASL_PLAINTEXT and SASL_SSL, not {self.protocol}")
        return self


def aiokafka_options(security: KafkaSecurity) -> dict[str, Any]:
    """The keyword arguments every aiokafka client gets for `security`."""
    options: dict[str, Any] = {"security_protocol": security.protocol.value}
    if security.protocol.uses_tls:
        options["ssl_context"] = ssl_context(security.tls or TlsConfig())
    sasl = security.sasl
    if sasl is not None:
        options["sasl_mechanism"] = sasl.mechanism.value
        if sasl.mechanism is Mechanism.OAUTHBEARER:
            assert sasl.oauth is not None  # the model requires it
            options["sasl_oauth_token_provider"] = ClientCredentialsTokens(sasl.oauth.tokens())
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
        reason = f" ({error.reason})" if error.reason else ""
        raise TlsFilesRefused(f"tls.ca_file: {tls.ca_file} holds no CA certificate{reason}") from None
    context.check_hostname = tls.check_hostname
    if tls.cert_file is not None:
        password = tls.key_password.get_secret_value() if tls.key_password else None
        try:
            context.load_cert_chain(str(tls.cert_file), str(tls.key_file) if tls.key_file else None, password)
        except ssl.SSLError as error:
            reason = f" ({error.reason})" if error.reason else ""
            raise TlsFilesRefused(
                f"tls: the client certificate {tls.cert_file} and its key cannot be loaded{reason}: "
                "is key_file its key, and key_password the key's password?"
            ) from None
    return context
