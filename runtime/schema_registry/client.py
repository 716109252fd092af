"""The Confluent schema registry API, the part serdes need: schemas by id (cached for the life of the
client), and a subject's schema registered or looked up.

Calls block: a serde calls from `serialize`/`deserialize`, which are synchronous, and only for an id or a
subject it has not met before, so the event loop waits for the registry once per schema, not per record.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runtime.config.schema_registry import SchemaRegistryConfig
from runtime.errors import StopAfterCommit

if TYPE_CHECKING:
    from runtime.schema_formats import SchemaType  # cavro and numpy load only for apps that need them

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
NOT_FOUND = 404


class RegistryUnavailable(StopAfterCommit):
    """The registry could not be reached or failed: no record is to blame, so the worker stops (committing
    what came before) rather than handing records to the error policy."""


class RegistryRefused(StopAfterCommit):
    """The registry answered no to what the app's configuration asks (its credentials, a schema it will
    not register): running on cannot help."""


class SchemaNotFound(LookupError):
    """A record names a schema id the registry does not have: that record's deserialization fails."""


@dataclass(frozen=True)
class RegisteredSchema:
    schema_id: int
    schema_type: SchemaType
    text: str


class RegistryClient:
    def __init__(self, config: SchemaRegistryConfig):
        self._config = config
        self._by_id: dict[int, RegisteredSchema] = {}
        self._headers = {"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE}
        if config.username is not None:
            pair = f"{config.username}:{config.password or ''}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()

    @property
    def config(self) -> SchemaRegistryConfig:
        return self._config

    @property
    def url(self) -> str:
        return self._config.url

    def schema(self, schema_id: int) -> RegisteredSchema:
        """The schema of an id a record carries."""
        known = self._by_id.get(schema_id)
        if known is None:
            answer = self._call("GET", f"/schemas/ids/{schema_id}", None, f"schema id {schema_id}")
            if answer is None:
                raise SchemaNotFound(f"schema id {schema_id} is not in the schema registry at {self.url}")
            known = self._by_id[schema_id] = RegisteredSchema(
                schema_id, answer.get("schemaType", "AVRO"), answer["schema"]
            )
        return known

    def register(self, subject: str, schema_type: SchemaType, text: str) -> RegisteredSchema:
        """The schema's id under `subject`, registered now if it was not."""
        body = {"schema": text, "schemaType": schema_type}
        answer = self._call("POST", f"/subjects/{_quoted(subject)}/versions", body, f"subject {subject}")
        if answer is None:
            raise RegistryRefused(f"the schema registry at {self.url} has no subject {subject} to register under")
        return self._remember(answer["id"], schema_type, text)

    def look_up(self, subject: str, schema_type: SchemaType, text: str) -> RegisteredSchema:
        """The id of a schema registered under `subject` already."""
        body = {"schema": text, "schemaType": schema_type}
        answer = self._call("POST", f"/subjects/{_quoted(subject)}", body, f"subject {subject}")
        if answer is None:
            raise RegistryRefused(
                f"the schema is not registered under subject {subject} at {self.url}, and "
                "schema_registry.auto_register is false: register it first"
            )
        return self._remember(answer["id"], schema_type, text)

    def latest(self, subject: str) -> RegisteredSchema:
        answer = self._call("GET", f"/subjects/{_quoted(subject)}/versions/latest", None, f"subject {subject}")
        if answer is None:
            raise RegistryRefused(
                f"subject {subject} has no schema in the registry at {self.url}: register one, or give the "
                "topic's schema file (key_schema or value_schema) to write with"
            )
        return self._remember(answer["id"], answer.get("schemaType", "AVRO"), answer["schema"])

    def _remember(self, schema_id: int, schema_type: SchemaType, text: str) -> RegisteredSchema:
        known = self._by_id.get(schema_id) or RegisteredSchema(schema_id, schema_type, text)
        self._by_id[schema_id] = known
        return known

    def _call(self, method: str, path: str, body: dict[str, Any] | None, what: str) -> dict[str, Any] | None:
        """The answer's JSON; None when the registry has no such thing (404)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers=self._headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self._config.timeout_s) as response:
                answer: dict[str, Any] = json.loads(response.read())
                return answer
        except urllib.error.HTTPError as error:
            detail = _message(error)
            if error.code == NOT_FOUND:
                return None
            if error.code < 500:
                raise RegistryRefused(
                    f"the schema registry at {self.url} refused {method} for {what}: {error.code} {detail}"
                ) from None
            message = f"the schema registry at {self.url} failed on {what}: {error.code} {detail}"
            raise RegistryUnavailable(message) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise RegistryUnavailable(f"the schema registry at {self.url} cannot be reached ({reason})") from None


def _quoted(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _message(error: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(error.read()).get("message", error.reason))
    except (ValueError, OSError, AttributeError):
        return str(error.reason)
