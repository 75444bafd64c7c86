"""Java itself as the reference for the formats Kafka reads with the JDK: `java.util.Properties`
for `server.properties`, and `X500Principal.getName()` for a client certificate's principal.
Runs a single-file Java program (`java Oracle.java`); tests skip where no JDK is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Final

import pytest

_SOURCE: Final = """
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.security.cert.*;
import java.util.*;

public class Oracle {
    public static void main(String[] args) throws Exception {
        if (args[0].equals("properties")) {
            Properties properties = new Properties();
            try (InputStream in = new FileInputStream(args[1])) { properties.load(in); }
            for (String key : new TreeSet<>(properties.stringPropertyNames())) {
                System.out.println(hex(key) + " " + hex(properties.getProperty(key)));
            }
        } else {
            CertificateFactory factory = CertificateFactory.getInstance("X.509");
            for (int i = 1; i < args.length; i++) {
                try (InputStream in = new FileInputStream(args[i])) {
                    X509Certificate certificate = (X509Certificate) factory.generateCertificate(in);
                    System.out.println(hex(certificate.getSubjectX500Principal().getName()));
                }
            }
        }
    }

    static String hex(String text) {
        StringBuilder out = new StringBuilder("x");
        for (byte b : text.getBytes(StandardCharsets.UTF_8)) out.append(String.format("%02x", b));
        return out.toString();
    }
}
"""


def _java(directory: Path, *args: str) -> list[str]:
    java = shutil.which("java")
    if java is None:
        pytest.skip("no JDK (java) installed")
    source = directory / "Oracle.java"
    source.write_text(_SOURCE)
    result = subprocess.run(
        [java, str(source), *args], capture_output=True, text=True, timeout=120, check=True
    )
    return result.stdout.splitlines()


def _text(hexed: str) -> str:
    return bytes.fromhex(hexed.removeprefix("x")).decode()


def java_properties(directory: Path, file: Path) -> dict[str, str]:
    """What `java.util.Properties.load` reads from `file`, as Kafka loads server.properties."""
    pairs = (line.split(" ") for line in _java(directory, "properties", str(file)))
    return {_text(key): _text(value) for key, value in pairs}


def java_subjects(directory: Path, certificates: list[Path]) -> list[str]:
    """`X500Principal.getName()` of each certificate's subject: Kafka's DEFAULT principal
    name."""
    return [_text(line) for line in _java(directory, "subject", *map(str, certificates))]
