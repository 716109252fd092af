"""The `schema_registry:` section of the app YAML."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runtime.redaction import USERINFO, redact

SubjectNameStrategy = Literal["topic_name", "record_name", "topic_record_name"]


class SchemaRegistryConfig(BaseModel):
    """Where the schemas of the topics whose serde is `avro` or `json_schema` are kept: a registry
    serving the Confluent API (Confluent Schema Registry, Apicurio's /apis/ccompat/v7, Karapace)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    username: str | None = None  # HTTP basic authentication, as Confluent's basic.auth.user.info
    password: str | None = None
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
