"""TLS for the SSL and SASL_SSL listeners, with Kafka's `ssl.*` settings, through Python's `ssl`.

Key stores are PEM (`ssl.keystore.type=PEM`): either a file with the private key and the
certificate chain (`ssl.keystore.location`), or both inline (`ssl.keystore.certificate.chain`
and `ssl.keystore.key`), the key encrypted or not (`ssl.key.password`). The trust store, which
client certificates are checked against, is a PEM file of CA certificates
(`ssl.truststore.location`) or the same inline (`ssl.truststore.certificates`).
`ssl.client.auth` is none, requested (a client may present a certificate) or required (a client
without one is refused in the handshake). A verified client certificate's subject is the
connection's principal, `User:<name>`, the name given by `ssl.principal.mapping.rules` (DEFAULT:
the RFC 2253 DN; Kafka's `RULE:pattern/replacement/[LU]` rules, `_principal_rules`); a
certificate no rule applies to is refused. TLS 1.2 is the oldest version ever accepted
(`ssl.enabled.protocols` may only narrow TLSv1.2,TLSv1.3).

Any of these may be set for one listener, as Kafka's `listener.name.<name>.ssl.*` (lower-case
name), over the broker-wide value. Key material and passwords are never logged, nor part of any
error message.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple

from diskless.kafka_server._server.auth._principal_rules import Rule, map_name, parse_rules
from diskless.kafka_server._server.auth._x500 import subject_dn

CLIENT_AUTH: Final = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
VERSIONS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
DEFAULT_PROTOCOLS: Final = "TLSv1.2,TLSv1.3"


class Hidden(str):
    """A secret setting's value: shown as `[hidden]`, as Kafka shows its password settings."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "'[hidden]'"


class TlsSettings(NamedTuple):
    """One listener's `ssl.*` settings (attribute: the property name without `ssl.`)."""

    keystore_type: str = "PEM"
    keystore_location: str = ""
    keystore_certificate_chain: str = ""
    keystore_key: str = ""
    key_password: str = ""
    truststore_type: str = "PEM"
    truststore_location: str = ""
    truststore_certificates: str = ""
    client_auth: str = "none"
    principal_mapping_rules: str = "DEFAULT"
    enabled_protocols: str = DEFAULT_PROTOCOLS

    def overridden(self, listener_settings: Mapping[str, str]) -> TlsSettings:
        """These, with a listener's own `ssl.*` values (by property name) over them."""
        changes = {
            name.removeprefix("ssl.").replace(".", "_"): value
            for name, value in listener_settings.items()
            if name.startswith("ssl.")
        }
        return self._replace(**changes)

    def check(self, listener: str, *, tls: bool) -> None:
        """The values' forms; for a listener that uses TLS (`tls`), that it has a key store.
        ValueError naming the property."""
        if self.keystore_type.upper() != "PEM":
            raise ValueError(f"ssl.keystore.type: only PEM is supported, not {self.keystore_type}")
        if self.truststore_type.upper() != "PEM":
            raise ValueError(
                f"ssl.truststore.type: only PEM is supported, not {self.truststore_type}"
            )
        if self.client_auth not in CLIENT_AUTH:
            raise ValueError(
                f"ssl.client.auth: {self.client_auth!r} is not one of none, requested, required"
            )
        parse_rules(self.principal_mapping_rules)
        self.versions()
        if self.keystore_location and (self.keystore_certificate_chain or self.keystore_key):
            raise ValueError(
                "ssl.keystore.location: set either it or ssl.keystore.certificate.chain and"
                " ssl.keystore.key, not both"
            )
        if bool(self.keystore_certificate_chain) != bool(self.keystore_key):
            raise ValueError(
                "ssl.keystore.certificate.chain: needs ssl.keystore.key, and the key the chain"
            )
        if self.truststore_location and self.truststore_certificates:
            raise ValueError(
                "ssl.truststore.location: set either it or ssl.truststore.certificates, not both"
            )
        if tls and not (self.keystore_location or self.keystore_certificate_chain):
            raise ValueError(
                f"ssl.keystore.location: listener {listener} uses TLS and needs a key store"
                " (or ssl.keystore.certificate.chain and ssl.keystore.key)"
            )

    def versions(self) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
        """The oldest and newest TLS version of `ssl.enabled.protocols`."""
        names = [p.strip() for p in self.enabled_protocols.split(",") if p.strip()]
        unknown = [n for n in names if n not in VERSIONS]
        if not names or unknown:
            raise ValueError(
                f"ssl.enabled.protocols: {self.enabled_protocols!r} must list TLSv1.2 and/or"
                " TLSv1.3 (older versions are never accepted)"
            )
        chosen = sorted(VERSIONS[n] for n in names)
        return chosen[0], chosen[-1]

    def server_context(self) -> ssl.SSLContext:
        """The listener's server context; ValueError naming the property whose material cannot
        be loaded (never quoting it)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version, context.maximum_version = self.versions()
        password = self.key_password or None
        try:
            if self.keystore_location:
                context.load_cert_chain(self.keystore_location, password=password)
            else:
                _load_inline_chain(context, self, password)
        except (OSError, ssl.SSLError) as error:
            prop = (
                "ssl.keystore.location"
                if self.keystore_location
                else "ssl.keystore.certificate.chain"
            )
            raise ValueError(
                f"{prop}: cannot load the key and certificate chain: {_why(error)}"
            ) from None
        context.verify_mode = CLIENT_AUTH[self.client_auth]
        try:
            if self.truststore_location:
                context.load_verify_locations(cafile=self.truststore_location)
            elif self.truststore_certificates:
                context.load_verify_locations(cadata=self.truststore_certificates)
            elif context.verify_mode != ssl.CERT_NONE:
                context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        except (OSError, ssl.SSLError) as error:
            prop = (
                "ssl.truststore.location"
                if self.truststore_location
                else "ssl.truststore.certificates"
            )
            raise ValueError(f"{prop}: cannot load the CA certificates: {_why(error)}") from None
        return context


def _load_inline_chain(
    context: ssl.SSLContext, settings: TlsSettings, password: str | None
) -> None:
    """`ssl` loads key stores only from files: the inline PEM goes to a private temporary file
    (readable by this user only) for as long as loading takes."""
    descriptor, path = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(descriptor, "w") as file:
            file.write(settings.keystore_key.strip() + "\n")
            file.write(settings.keystore_certificate_chain.strip() + "\n")
        context.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def _why(error: BaseException) -> str:
    """The reason without anything read from the material: the library's reason or errno."""
    if isinstance(error, ssl.SSLError):
        return error.reason or "not valid PEM (or a wrong ssl.key.password)"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return type(error).__name__


class NoMatchingRule(ValueError):
    """A client certificate whose subject no `ssl.principal.mapping.rules` rule applies to."""


def principal(ssl_object: ssl.SSLObject | None, rules: Sequence[Rule]) -> str | None:
    """`User:<name>` of the verified client certificate of a TLS connection, its subject mapped
    by `rules`; None without a certificate."""
    if ssl_object is None:
        return None
    certificate = ssl_object.getpeercert(binary_form=True)
    if not certificate:
        return None
    dn = subject_dn(certificate)
    name = map_name(rules, dn)
    if name is None:
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {dn!r}")
    return f"User:{name}"
