"""Real certificates for TLS tests, made with the `openssl` command: a CA, a server certificate
for 127.0.0.1 and localhost, and client certificates signed by it (and one by another CA)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

KEY_PASSWORD: Final = "s3cret-key-pass"
CLIENT_SUBJECT: Final = "/C=US/O=Diskless Tests/OU=clients/CN=alice"
CLIENT_DN: Final = "CN=alice,OU=clients,O=Diskless Tests,C=US"
"""`CLIENT_SUBJECT` as Kafka's DEFAULT principal mapping writes it (RFC 2253: last RDN first)."""


@dataclass(frozen=True)
class Certs:
    ca: Path
    """The CA certificate (PEM): the trust store of servers and clients."""
    server_keystore: Path
    """Key and certificate chain in one PEM (`ssl.keystore.location`)."""
    server_cert: Path
    server_key: Path
    server_encrypted_keystore: Path
    """The same key store with its key encrypted with `KEY_PASSWORD`."""
    client_cert: Path
    client_key: Path
    stranger_cert: Path
    """A client certificate of another CA, which the servers do not trust."""
    stranger_key: Path

    def client_context(self, *, certificate: bool = True) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        if certificate:
            context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _key(name: str, cwd: Path) -> None:
    _openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", name,
        cwd=cwd,
    )  # fmt: skip


def _signed(name: str, subject: str, ca: str, cwd: Path, extensions: str = "") -> None:
    _key(f"{name}.key", cwd)
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=cwd)
    extra = []
    if extensions:
        (cwd / f"{name}.ext").write_text(extensions + "\n")
        extra = ["-extfile", f"{name}.ext"]
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", *extra,
        cwd=cwd,
    )  # fmt: skip


def _ca(name: str, subject: str, cwd: Path) -> None:
    _key(f"{name}.key", cwd)
    _openssl(
        "req", "-x509", "-new", "-key", f"{name}.key", "-subj", subject, "-days", "2",
        "-out", f"{name}.pem",
        cwd=cwd,
    )  # fmt: skip


def make_certs(directory: Path) -> Certs:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (./run installs it)")
    directory.mkdir(parents=True, exist_ok=True)
    _ca("ca", "/CN=diskless test CA", directory)
    _ca("other-ca", "/CN=another CA", directory)
    _signed(
        "server",
        "/CN=localhost",
        "ca",
        directory,
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth",
    )
    _signed("client", CLIENT_SUBJECT, "ca", directory, "extendedKeyUsage=clientAuth")
    _signed("stranger", "/CN=mallory", "other-ca", directory, "extendedKeyUsage=clientAuth")
    keystore = directory / "server-keystore.pem"
    keystore.write_text(
        (directory / "server.key").read_text() + (directory / "server.pem").read_text()
    )
    _openssl(
        "pkcs8", "-topk8", "-in", "server.key", "-v2", "aes-256-cbc",
        "-passout", f"pass:{KEY_PASSWORD}", "-out", "server-encrypted.key",
        cwd=directory,
    )  # fmt: skip
    encrypted = directory / "server-encrypted-keystore.pem"
    encrypted.write_text(
        (directory / "server-encrypted.key").read_text() + (directory / "server.pem").read_text()
    )
    return Certs(
        ca=directory / "ca.pem",
        server_keystore=keystore,
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        server_encrypted_keystore=encrypted,
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        stranger_cert=directory / "stranger.pem",
        stranger_key=directory / "stranger.key",
    )


@dataclass(frozen=True)
class HostCerts:
    """A CA and one key store per host address, for brokers on several hosts."""

    ca: Path
    keystores: dict[str, Path]
    """Address -> key and certificate chain in one PEM, the certificate's SAN that IP address."""


def make_host_certs(directory: Path, addresses: list[str]) -> HostCerts:
    """A CA, and for each address a server certificate it signed whose only name is that IP (a
    client that verifies the broker's name connects by address)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (./run installs it)")
    directory.mkdir(parents=True, exist_ok=True)
    _ca("ca", "/CN=diskless cluster CA", directory)
    keystores = {}
    for address in addresses:
        name = f"broker-{address}"
        extensions = f"subjectAltName=IP:{address}\nextendedKeyUsage=serverAuth"
        _signed(name, f"/CN={address}", "ca", directory, extensions)
        keystore = directory / f"{name}-keystore.pem"
        keystore.write_text(
            (directory / f"{name}.key").read_text() + (directory / f"{name}.pem").read_text()
        )
        keystores[address] = keystore
    return HostCerts(ca=directory / "ca.pem", keystores=keystores)
