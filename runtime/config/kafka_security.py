"""`kafka.security`: how every client of the app reaches a secured cluster (TLS, SASL, OAUTHBEARER).

aiokafka takes TLS as an `ssl.SSLContext` and OAUTHBEARER as a token provider object, which YAML
cannot express: this section says what they are made from, and `runtime/kafka/security.py` makes
them, once, for every client the runtime builds.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import FilePath, HttpUrl, SecretStr, model_validator

from runtime.config.common import Strict


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
