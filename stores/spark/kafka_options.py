"""Spark's Kafka source and sink options (the Java client's, prefixed `kafka.`) for `kafka.security`, so a Spark job
reaches a secured cluster as the app's own clients do."""

from __future__ import annotations

from pathlib import Path

from stores.kafka_security import KafkaSecurity, Mechanism, TlsConfig

LOGIN_MODULES = {
    Mechanism.PLAIN: "org.apache.kafka.common.security.plain.PlainLoginModule",
    Mechanism.SCRAM_SHA_256: "org.apache.kafka.common.security.scram.ScramLoginModule",
    Mechanism.SCRAM_SHA_512: "org.apache.kafka.common.security.scram.ScramLoginModule",
    Mechanism.OAUTHBEARER: "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
    Mechanism.GSSAPI: "com.sun.security.auth.module.Krb5LoginModule",
}
OAUTH_LOGIN_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"


def _quoted(value: str) -> str:
    """A JAAS option value: in double quotes, with backslashes and quotes escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _jaas(mechanism: Mechanism, options: dict[str, str]) -> str:
    pairs = "".join(f" {name}={_quoted(value)}" for name, value in options.items())
    return f"{LOGIN_MODULES[mechanism]} required{pairs};"


def _tls_options(tls: TlsConfig) -> dict[str, str]:
    """PEM files as Kafka's Java client reads them: the CA as a PEM trust store, the client certificate and
    its key (PKCS#8) given inline."""
    options: dict[str, str] = {}
    if tls.ca_file is not None:
        options |= {"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(tls.ca_file)}
    if not tls.check_hostname:
        options["kafka.ssl.endpoint.identification.algorithm"] = ""
    if tls.cert_file is not None:
        options |= {
            "kafka.ssl.keystore.type": "PEM",
            "kafka.ssl.keystore.certificate.chain": Path(tls.cert_file).read_text(),
            "kafka.ssl.keystore.key": Path(tls.key_file or tls.cert_file).read_text(),
        }
        if tls.key_password is not None:
            options["kafka.ssl.key.password"] = tls.key_password.get_secret_value()
    return options


def spark_kafka_options(security: KafkaSecurity) -> dict[str, str]:
    """The options to add to `spark.read.format("kafka")` and `frame.write.format("kafka")`."""
    options = {"kafka.security.protocol": security.protocol.value}
    if security.protocol.uses_tls:
        options |= _tls_options(security.tls or TlsConfig())
    sasl = security.sasl
    if sasl is None:
        return options
    options["kafka.sasl.mechanism"] = sasl.mechanism.value
    if sasl.mechanism is Mechanism.OAUTHBEARER:
        assert sasl.oauth is not None  # the model requires it
        oauth = sasl.oauth
        credentials = {"clientId": oauth.client_id, "clientSecret": oauth.client_secret.get_secret_value()}
        options |= {
            "kafka.sasl.oauthbearer.token.endpoint.url": str(oauth.token_endpoint),
            "kafka.sasl.login.callback.handler.class": OAUTH_LOGIN_HANDLER,
            "kafka.sasl.jaas.config": _jaas(
                sasl.mechanism, credentials | ({"scope": oauth.scope} if oauth.scope else {})
            ),
        }
    elif sasl.mechanism is Mechanism.GSSAPI:
        options |= {
            "kafka.sasl.kerberos.service.name": sasl.kerberos_service_name,
            "kafka.sasl.jaas.config": _jaas(sasl.mechanism, {"useTicketCache": "true"}),
        }
    else:
        assert sasl.username is not None and sasl.password is not None  # the model requires them
        credentials = {"username": sasl.username, "password": sasl.password.get_secret_value()}
        options["kafka.sasl.jaas.config"] = _jaas(sasl.mechanism, credentials)
    return options
