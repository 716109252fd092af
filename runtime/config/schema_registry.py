"""The `schema_registry:` section of the app YAML."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from runtime.redaction import USERINFO, redact
from stores.kafka_security import OAuthConfig, TlsConfig, TlsFilesRefused, ssl_context

SubjectNameStrategy = Literal["topic_name", "record_name", "topic_record_name"]


class SchemaRegistryConfig(BaseModel):
    """Where the schemas of the topics whose serde is `avro` or `json_schema` are kept: a registry
    serving the Confluent API (Confluent Schema Registry, Apicurio's /apis/ccompat/v7, Karapace)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    # HTTPS: the CA the registry's certificate must chain to, a client certificate: as kafka.security.tls.
    tls: TlsConfig | None = None
    # One way to authenticate, or none: HTTP basic authentication (as Confluent's basic.auth.user.info), a
    # bearer token as it is, or bearer tokens from an OIDC token endpoint (as kafka.security.sasl.oauth).
    username: str | None = None
    password: SecretStr | None = None
    token: SecretStr | None = None
    oauth: OAuthConfig | None = None
    # Register the schema a topic is written with (its `value_schema` file) on first use; false: it must
    # be registered already (a pipeline registers schemas, apps only look them up).
    auto_register: bool = True
    # The subject of a topic's schemas: <topic>-key / <topic>-value (topic_name), the record's full name
    # (record_name), or <topic>-<record's full name> (topic_record_name).
    subject_name_strategy: SubjectNameStrategy = "topic_name"
    timeout_s: float = Field(default=10.0, gt=0)

    @field_validator("url")
    @classmethod
    def _http_without_credentials(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"'{redact(url)}' is not an http:// or https:// URL")
        if USERINFO.search(url):
            raise ValueError(f"'{redact(url)}' holds credentials; give them as username and password")
        return url.rstrip("/")

    @model_validator(mode="after")
    def _one_way_to_authenticate(self) -> SchemaRegistryConfig:
        given = [
            name
            for name, present in (
                ("username and password", self.username is not None or self.password is not None),
                ("token", self.token is not None),
                ("oauth", self.oauth is not None),
            )
            if present
        ]
        if len(given) > 1:
            raise ValueError(
                f"{' and '.join(given)} given: authenticate one way only (username and password, token, or oauth)"
            )
        if self.password is not None and self.username is None:
            raise ValueError("password needs username")
        if self.tls is not None and not self.url.startswith("https://"):
            raise ValueError("tls is for an https:// url")
        return self

    @model_validator(mode="after")
    def _tls_files_load(self) -> SchemaRegistryConfig:
        """A CA file or client key that cannot be loaded is a mistake in the YAML, told before anything starts."""
        if self.tls is not None:
            try:
                ssl_context(self.tls)
            except TlsFilesRefused as error:
                raise ValueError(str(error)) from None
        return self
