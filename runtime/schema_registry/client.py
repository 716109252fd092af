"""The Confluent schema registry API, the part serdes need: schemas by id (cached for the life of the
client), and a subject's schema registered or looked up.

Calls block: a serde calls from `serialize`/`deserialize`, which are synchronous, and only for an id or a
subject it has not met before, so the event loop waits for the registry once per schema, not per record.

A registry that refuses the client's security (a certificate that fails verification, credentials it does not
accept) stops the app with one line naming the registry and the cause: retrying cannot help.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runtime.certificate_faults import CertificateChecks
from runtime.config.schema_registry import SchemaRegistryConfig
from runtime.errors import StopAfterCommit
from runtime.schema_registry.credentials import credentials
from stores.kafka_security import TlsConfig, ssl_context
from stores.oauth_tokens import TokenRefused

if TYPE_CHECKING:
    from runtime.schema_formats import SchemaType  # cavro and numpy load only for apps that need them

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
NOT_FOUND = 404
UNAUTHORIZED = 401
FORBIDDEN = 403
REGISTRY_CERTIFICATES = CertificateChecks("schema_registry.tls", "the registry", "schema_registry.url")


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
        self._credentials = credentials(config)
        self._tls = _tls_context(config)

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
        request = urllib.request.Request(self.url + path, data=data, headers=self._headers(), method=method)
        try:
            with urllib.request.urlopen(request, timeout=self._config.timeout_s, context=self._tls) as response:
                answer: dict[str, Any] = json.loads(response.read())
                return answer
        except urllib.error.HTTPError as error:
            detail = _message(error)
            if error.code == NOT_FOUND:
                return None
            refused = f"the schema registry at {self.url} refused {method} for {what}: {error.code} {detail}"
            if error.code == UNAUTHORIZED and not request.has_header("Authorization"):
                asks = f"the registry asks for credentials: set {self._credentials.field}"
                raise RegistryRefused(f"{refused}: {asks}") from None
            if error.code == UNAUTHORIZED:
                raise RegistryRefused(f"{refused}: bad credentials: check {self._credentials.field}") from None
            if error.code == FORBIDDEN:
                raise RegistryRefused(
                    f"{refused}: the registry does not grant it to {self._credentials.field}"
                ) from None
            if error.code < 500:
                raise RegistryRefused(refused) from None
            message = f"the schema registry at {self.url} failed on {what}: {error.code} {detail}"
            raise RegistryUnavailable(message) from None
        except urllib.error.URLError as error:
            raise self._unreached(error.reason) from None
        except OSError as error:
            raise self._unreached(error) from None

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE}
        try:
            authorization = self._credentials.authorization()
        except TokenRefused as error:
            raise RegistryRefused(
                f"the schema registry at {self.url} was not asked: {error.reason}: check {self._credentials.field}"
            ) from None
        if authorization is not None:
            headers["Authorization"] = authorization
        return headers

    def _unreached(self, reason: object) -> StopAfterCommit:
        """A certificate that fails verification, or a handshake the registry broke off, is refused: retrying
        cannot help. Anything else may pass."""
        if isinstance(reason, ssl.SSLCertVerificationError):
            cause = REGISTRY_CERTIFICATES.cause(reason)
            return RegistryRefused(f"the schema registry at {self.url} failed the TLS handshake: {cause}")
        if isinstance(reason, ssl.SSLError):
            return RegistryRefused(
                f"the schema registry at {self.url} failed the TLS handshake ({reason.reason or reason}): "
                "check schema_registry.url (https://) and schema_registry.tls"
            )
        return RegistryUnavailable(f"the schema registry at {self.url} cannot be reached ({reason})")


def _tls_context(config: SchemaRegistryConfig) -> ssl.SSLContext | None:
    """The config loaded its TLS files already, so this cannot fail."""
    return ssl_context(config.tls or TlsConfig()) if config.url.startswith("https://") else None


def _quoted(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _message(error: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(error.read()).get("message", error.reason))
    except (ValueError, OSError, AttributeError):
        return str(error.reason)
