"""The secured listeners a local broker may open beside PLAINTEXT, for testing clients against each.

| listener | protocol | what a client meets |
|---|---|---|
| `SSL` | SSL | the broker's certificate, signed by the throwaway CA, for 127.0.0.1 and localhost |
| `MTLS` | SSL | the same, and the client must present a certificate the CA signed |
| `SASL_SSL` | SASL_SSL | TLS as on `SSL`, then SCRAM-SHA-256, SCRAM-SHA-512, PLAIN or OAUTHBEARER |
| `SASL_PLAINTEXT` | SASL_PLAINTEXT | the same mechanisms without TLS |
| `WRONG_HOST` | SSL | a certificate for another host name |
| `EXPIRED` | SSL | a certificate that expired yesterday |

Brokers talk to each other on `INTERNAL` (SASL_PLAINTEXT, SCRAM-SHA-512) and to the controllers on
`CONTROLLER` (SASL_PLAINTEXT, PLAIN: SCRAM's credentials are in the metadata the controllers serve) as
the admin user, a super user of the StandardAuthorizer. Every principal may do what no ACL restricts
(`allow.everyone.if.no.acl.found`), so an app runs as any user until a test adds ACLs. OAUTHBEARER
takes Kafka's unsecured JWS tokens (`alg: none`), with their `sub` as the principal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from runtime.devkafka.certificates import Certificates

CLIENT_LISTENERS = {
    "SSL": "SSL",
    "MTLS": "SSL",
    "SASL_SSL": "SASL_SSL",
    "SASL_PLAINTEXT": "SASL_PLAINTEXT",
    "WRONG_HOST": "SSL",
    "EXPIRED": "SSL",
}
INTERNAL = "INTERNAL"
SASL_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN", "OAUTHBEARER")
ADMIN = "admin"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}


@dataclass(frozen=True)
class Security:
    """What every node of a secured local cluster shares: its certificates and its users (name to
    password; `admin` among them), each known to SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN."""

    certificates: Certificates
    users: Mapping[str, str] = field(default_factory=dict)

    @property
    def admin_password(self) -> str:
        return self.users[ADMIN]

    def scram_arguments(self) -> list[str]:
        """`kafka-storage format` arguments that create every user's SCRAM credentials."""
        return [
            argument
            for name, password in self.users.items()
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
            for argument in ("--add-scram", f"{mechanism}=[name={name},password={password}]")
        ]

    def settings(self, ports: Mapping[str, int]) -> dict[str, str]:
        """The broker properties for the listeners of `ports` (each of `CLIENT_LISTENERS` and `INTERNAL`)."""
        certificates = self.certificates
        keystore = {
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": certificates.keystore_password,
            "ssl.key.password": certificates.keystore_password,
        }
        settings = {
            "listener.security.protocol.map": ",".join(
                f"{name}:{protocol}"
                for name, protocol in {
                    **CLIENT_LISTENERS,
                    INTERNAL: "SASL_PLAINTEXT",
                    "PLAINTEXT": "PLAINTEXT",
                    "CONTROLLER": "SASL_PLAINTEXT",
                }.items()
            ),
            "inter.broker.listener.name": INTERNAL,
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
            f"listener.name.{INTERNAL.lower()}.sasl.enabled.mechanisms": "SCRAM-SHA-512",
            f"listener.name.{INTERNAL.lower()}.scram-sha-512.sasl.jaas.config": self._scram_login(),
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": self._plain_login(),
            **keystore,
            "ssl.keystore.location": str(certificates.broker_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(certificates.ca_file),
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.wrong_host.ssl.keystore.location": str(certificates.wrong_host_keystore),
            "listener.name.expired.ssl.keystore.location": str(certificates.expired_keystore),
            "authorizer.class.name": AUTHORIZER,
            "super.users": f"User:{ADMIN}",
            "allow.everyone.if.no.acl.found": "true",
        }
        for name in ("wrong_host", "expired"):
            settings.update({f"listener.name.{name}.{key}": value for key, value in keystore.items()})
        for listener in ("sasl_ssl", "sasl_plaintext"):
            settings.update(self._sasl_logins(listener))
        return settings

    def _scram_login(self) -> str:
        return f'{LOGIN_MODULES["SCRAM"]} required username="{ADMIN}" password="{self.admin_password}";'

    def _plain_login(self) -> str:
        users = " ".join(f'user_{name}="{password}"' for name, password in self.users.items())
        return f'{LOGIN_MODULES["PLAIN"]} required username="{ADMIN}" password="{self.admin_password}" {users};'

    def _sasl_logins(self, listener: str) -> dict[str, str]:
        prefix = f"listener.name.{listener}"
        return {
            f"{prefix}.scram-sha-256.sasl.jaas.config": self._scram_login(),
            f"{prefix}.scram-sha-512.sasl.jaas.config": self._scram_login(),
            f"{prefix}.plain.sasl.jaas.config": self._plain_login(),
            f"{prefix}.oauthbearer.sasl.jaas.config": (
                f'{LOGIN_MODULES["OAUTHBEARER"]} required unsecuredLoginStringClaim_sub="{ADMIN}";'
            ),
        }
