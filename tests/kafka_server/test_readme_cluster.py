"""Unit: the README's server.properties files are accepted as the broker reads them, and its
start commands use only flags the command has.

Every fenced block of the README whose first line is `# /etc/diskless/server.properties ...` is
a broker's file; one that says `the same, except` is read over the first host's file of its
section. Each is read as `--config` reads it (Java's format, `node.id` taken out) and its
listeners checked together, as at start (the key files named are not loaded: they exist only on
the hosts).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Final

import pytest

from diskless.kafka_server.__main__ import main
from diskless.kafka_server._protocol.security_protocol import SecurityProtocol
from diskless.kafka_server._server.settings.listeners import listener_plan
from diskless.kafka_server._server.settings.properties import parse_properties
from diskless.kafka_server._server.settings.server_properties import server_config

README: Final = Path(__file__).resolve().parents[2] / "README.md"
BLOCK: Final = re.compile(r"^ *```[a-z]*\n(.*?)^ *```", re.DOTALL | re.MULTILINE)
FILE_HEADER: Final = "# /etc/diskless/server.properties"
COMMAND: Final = "python -m diskless.kafka_server"


def _blocks() -> list[str]:
    return BLOCK.findall(README.read_text())


def _server_files() -> list[tuple[str, dict[str, str]]]:
    """(first line, the properties) of each broker's file, a partial one over its base."""
    files: list[tuple[str, dict[str, str]]] = []
    base: dict[str, str] = {}
    for block in _blocks():
        header = block.splitlines()[0]
        if not header.startswith(FILE_HEADER):
            continue
        properties = parse_properties(block, header)
        if "the same, except" in header:
            properties = {**base, **properties}
        else:
            base = properties
        files.append((header, properties))
    return files


def test_the_readme_s_server_properties_files_are_accepted() -> None:
    files = _server_files()
    headers = [header for header, _ in files]
    assert sum("on 10.0.0.1" in header for header in headers) == 3, headers
    advertised = set()
    for header, properties in files:
        properties = dict(properties)
        node_id = int(properties.pop("node.id"))
        config = server_config(properties)
        plan = listener_plan(
            config.listeners, config.advertised_listeners, config.listener_security_protocol_map
        )
        assert plan.listeners, header
        if "on 10.0.0.1" in header:  # the three hosts': SASL_SSL, each its own address and id
            assert node_id in (1, 2, 3), header
            assert plan.protocols["SASL_SSL"] is SecurityProtocol.SASL_SSL
            assert config.authorizer_class_name and config.super_users == "User:admin"
            (listener,) = plan.advertised.values()
            advertised.add((node_id, listener.host, config.broker_rack))
    assert len(advertised) == 3 and len({host for _, host, _ in advertised}) == 3, advertised


def test_the_readme_s_start_commands_use_only_existing_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    flags = set(re.findall(r"--[a-z0-9-]+", capsys.readouterr().out))
    commands = [
        " ".join(block.replace("\\\n", " ").splitlines()) for block in _blocks() if COMMAND in block
    ]
    assert len(commands) >= 3, commands
    used = {
        token.partition("=")[0]
        for command in commands
        for token in shlex.split(command)
        if token.startswith("--")
    }
    assert "--config" in used and "--s3-ca-bundle" in used
    assert used <= flags, sorted(used - flags)
