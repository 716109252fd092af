"""The schema registry over HTTPS with a private CA and bearer tokens, against a real registry (Apicurio
Registry serving HTTPS alone and verifying each request's signed JWT): an Avro app round trips with tokens
from a token endpoint; a certificate the app does not trust, a name the certificate does not hold, and a token
the registry does not accept each stop the app or command with one line naming the registry and the cause."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import SecretStr

from runtime.config.schema_registry import SchemaRegistryConfig
from runtime.devkafka.certificates import Certificates
from runtime.schema_registry.client import RegistryClient, RegistryRefused
from runtime.schema_registry.serdes import registry_serde
from stores.kafka_security import TlsConfig
from tests.conftest import TopicNamer
from tests.integration.test_schema_registry import PAYMENT, avro_app, fresh_topic, schema_file
from tests.support.commands import run_command
from tests.support.kafka_helpers import create_topic, produce, read_topic
from tests.support.running import spawn_worker, write_app
from tests.support.schema_registry import LocalRegistry, RegistryTls
from tests.support.signed_tokens import TokenSigner
from tests.support.token_endpoint import token_endpoint

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class SecuredRegistry:
    url: str
    certificates: Certificates
    signer: TokenSigner

    def tls(self, ca_file: Path | None = None) -> dict[str, str]:
        return {"ca_file": str(ca_file or self.certificates.ca_file)}


@pytest.fixture(scope="module")
def secured_registry(tmp_path_factory: pytest.TempPathFactory, certificates: Certificates) -> Iterator[SecuredRegistry]:
    signer = TokenSigner()
    tls = RegistryTls(certificates.pem("broker").cert_file, certificates.pem("broker").key_file, certificates.ca_file)
    registry = LocalRegistry(
        log_file=tmp_path_factory.mktemp("registry") / "registry.log", tls=tls, token_key=signer.public_key
    )
    registry.start()
    try:
        yield SecuredRegistry(registry.url, certificates, signer)
    finally:
        registry.stop()


def test_a_static_token_round_trips_and_a_name_the_certificate_does_not_hold_is_refused(
    secured_registry: SecuredRegistry, tmp_path: Path
) -> None:
    token = secured_registry.signer.token("app", 600)
    tls = TlsConfig.model_validate(secured_registry.tls())
    client = RegistryClient(SchemaRegistryConfig(url=secured_registry.url, tls=tls, token=SecretStr(token)))
    topic = fresh_topic()
    avro = registry_serde("avro", client, topic, "value", schema_file(tmp_path, "p.avsc", PAYMENT))
    written = avro.serialize({"id": "p1", "amount": 5})
    reader = RegistryClient(SchemaRegistryConfig(url=secured_registry.url, tls=tls, token=SecretStr(token)))
    assert registry_serde("avro", reader, topic, "value", None).deserialize(written) == {"id": "p1", "amount": 5}

    # 127.1 is 127.0.0.1 to the resolver, but a host name the certificate (127.0.0.1, localhost) does not hold.
    renamed = secured_registry.url.replace("127.0.0.1", "127.1")
    mismatched = RegistryClient(SchemaRegistryConfig(url=renamed, tls=tls, token=SecretStr(token)))
    with pytest.raises(RegistryRefused) as refused:
        mismatched.latest(f"{topic}-value")
    assert str(refused.value) == (
        f"the schema registry at {renamed} failed the TLS handshake: Hostname mismatch, certificate is not valid "
        "for '127.1'.: hostname mismatch: connect by a name the certificate holds (schema_registry.url)"
    )
    unchecked = TlsConfig.model_validate({**secured_registry.tls(), "check_hostname": False})
    lenient = RegistryClient(SchemaRegistryConfig(url=renamed, tls=unchecked, token=SecretStr(token)))
    assert lenient.latest(f"{topic}-value").schema_id == int.from_bytes(written[1:5], "big")

    anonymous = RegistryClient(SchemaRegistryConfig(url=secured_registry.url, tls=tls))
    with pytest.raises(
        RegistryRefused,
        match=r"401 .*: the registry asks for credentials: set schema_registry.username and password, token or oauth$",
    ):
        anonymous.latest(f"{topic}-value")


async def test_an_avro_app_reads_and_writes_over_https_with_tokens_from_the_token_endpoint(
    secured_registry: SecuredRegistry,
    kafka_bootstrap: str,
    topic_name: TopicNamer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client_secret = secrets.token_hex(12)
    monkeypatch.setenv("REGISTRY_CLIENT_SECRET", client_secret)
    with token_endpoint({"payments": client_secret}, issuer=secured_registry.signer) as endpoint:
        oauth = {"token_endpoint": endpoint.url, "client_id": "payments"}
        tls = secured_registry.tls()
        registry = {
            "url": secured_registry.url,
            "tls": tls,
            "oauth": {**oauth, "client_secret": "${REGISTRY_CLIENT_SECRET}"},
        }
        app, source, sink = avro_app(topic_name, tmp_path, kafka_bootstrap, "", schema_registry=registry)
        client = RegistryClient(SchemaRegistryConfig.model_validate(
            {"url": secured_registry.url, "tls": tls, "oauth": {**oauth, "client_secret": client_secret}}
        ))  # fmt: skip
        payments = registry_serde("avro", client, source, "value", Path(app["topics"][source]["value_schema"]))
        records = [(f"p{n}".encode(), payments.serialize({"id": f"p{n}", "amount": n * 100})) for n in range(5)]
        await create_topic(kafka_bootstrap, source)
        await produce(kafka_bootstrap, source, records)

        log = tmp_path / "app.log"
        worker = spawn_worker(write_app(tmp_path, app), "--until-caught-up", log=log)
        assert await asyncio.to_thread(worker.wait, 120) == 0, log.read_text()
        taxed = registry_serde("avro", client, sink, "value", None)
        outputs = [taxed.deserialize(record.value) for record in await read_topic(kafka_bootstrap, sink)]
    assert outputs == [{"id": f"p{n}", "amount": n * 100, "tax": n * 10} for n in range(5)]
    assert len(endpoint.requests) == 2, "one token for the test's client, one for the app's process"
    assert client_secret not in log.read_text()


async def test_a_certificate_the_app_does_not_trust_stops_it_with_one_line(
    secured_registry: SecuredRegistry, kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    token = secured_registry.signer.token("app", 600)
    app, source, _ = avro_app(
        topic_name, tmp_path, kafka_bootstrap, "",
        schema_registry={"url": secured_registry.url, "token": token,
                         "tls": secured_registry.tls(secured_registry.certificates.other_ca_file)},
        errors={"deserialization": "dead_letter"},
    )  # fmt: skip
    await create_topic(kafka_bootstrap, source)
    await produce(kafka_bootstrap, source, [(b"a", b"\x00\x00\x00\x00\x01\x02a\x14")])
    log = tmp_path / "app.log"
    worker = spawn_worker(write_app(tmp_path, app), "--until-caught-up", log=log)
    assert await asyncio.to_thread(worker.wait, 120) == 1
    printed = log.read_text()
    (line,) = [line for line in printed.splitlines() if "error:" in line]
    assert line.endswith(
        f"error: the schema registry at {secured_registry.url} failed the TLS handshake: unable to get local issuer "
        "certificate: unknown CA: schema_registry.tls.ca_file (or, when it names none, the system's trust store) "
        "does not hold the CA that signed it"
    )
    assert "Traceback" not in printed and token not in printed
    assert await read_topic(kafka_bootstrap, f"{app['app_id']}-dead-letters") == []


async def test_a_token_the_registry_does_not_accept_makes_produce_exit_1_naming_401(
    secured_registry: SecuredRegistry, kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    forged = TokenSigner().token("app", 600)
    monkeypatch.setenv("REGISTRY_TOKEN", forged)
    app, source, _ = avro_app(
        topic_name, tmp_path, kafka_bootstrap, "",
        schema_registry={"url": secured_registry.url, "token": "${REGISTRY_TOKEN}", "tls": secured_registry.tls()},
    )  # fmt: skip
    path = write_app(tmp_path, app)
    await create_topic(kafka_bootstrap, source)
    refused = run_command(
        kafka_bootstrap, "produce", source, "--app", str(path), stdin='{"value": {"id": "p", "amount": 1}}'
    )
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        f"error: the schema registry at {secured_registry.url} refused POST for subject {source}-value: "
        "401 Unauthorized: bad credentials: check schema_registry.token"
    )
    assert forged not in refused.stderr + refused.stdout
