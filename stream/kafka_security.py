"""The Kafka clients' security settings (``KAFKA_SECURITY_PROTOCOL``, SASL, TLS): one group
of the settings table, read by ``stream.config.Settings.from_env`` and handed to aiokafka
(``ssl_context``) and to librdkafka (``librdkafka``) alike."""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stream.environment import KAFKA, protocol, setting, upper

if TYPE_CHECKING:  # imported where used: `stream fold` needs no TLS (~10 ms of start-up)
    import ssl


@dataclass(frozen=True)
class KafkaSecurity:
    protocol: str = setting(
        "KAFKA_SECURITY_PROTOCOL",
        "PLAINTEXT",
        protocol,
        group=KAFKA,
        help="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
        keep_empty=True,
    )
    sasl_mechanism: str = setting(
        "KAFKA_SASL_MECHANISM",
        "PLAIN",
        upper,
        group=KAFKA,
        help="PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
        keep_empty=True,
    )
    sasl_username: str | None = setting("KAFKA_SASL_USERNAME", None, group=KAFKA, help="SASL user")
    sasl_password: str | None = setting(
        "KAFKA_SASL_PASSWORD", None, group=KAFKA, help="SASL password (never logged)", secret=True
    )
    ssl_cafile: str | None = setting(
        "KAFKA_SSL_CAFILE", None, group=KAFKA, help="CA bundle (unset: the system's public CAs)"
    )
    ssl_certfile: str | None = setting(
        "KAFKA_SSL_CERTFILE", None, group=KAFKA, help="client certificate (mutual TLS only)"
    )
    ssl_keyfile: str | None = setting(
        "KAFKA_SSL_KEYFILE", None, group=KAFKA, help="client key (mutual TLS only)"
    )

    @property
    def uses_ssl(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def ssl_context(self) -> "ssl.SSLContext":
        import ssl

        context = ssl.create_default_context(cafile=self.ssl_cafile)
        if self.ssl_certfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        return context

    def librdkafka(self) -> dict[str, Any]:
        """The same settings in confluent-kafka (librdkafka) terms."""
        conf: dict[str, Any] = {"security.protocol": self.protocol}
        if self.uses_sasl:
            conf |= {
                "sasl.mechanisms": self.sasl_mechanism,
                "sasl.username": self.sasl_username or "",
                "sasl.password": self.sasl_password or "",
            }
        for key, value in (
            ("ssl.ca.location", self.ssl_cafile),
            ("ssl.certificate.location", self.ssl_certfile),
            ("ssl.key.location", self.ssl_keyfile),
        ):
            if value:
                conf[key] = value
        return conf


__all__ = ["KafkaSecurity"]
