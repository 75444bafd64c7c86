"""Acceptance: the README's "A cluster on three hosts" runs as written.

The section's fenced blocks are read from README.md, so a change to them that breaks the
walkthrough fails here, and run with only the hosts' addresses (and ports) and the files' paths
changed, on six hosts of a test network:

- PostgreSQL's host: a fresh server given the section's configuration lines and `pg_hba.conf`
  line (TLS, and a password for the role over the network: no other line lets anyone in from the
  hosts), then its SQL, as the superuser;
- the S3 host: moto's server over https, the bucket created beforehand;
- three broker hosts: each its `server.properties` (the first host's file, the others' lines over
  it), its `~/.pgpass`, and the section's start command, word for word;
- the client host: the section's Python blocks, in order, in one process: the administrator
  creates the SCRAM user, the topic and the ACLs; the user produces and consumes with
  confluent-kafka and produces with kafka-python, over SASL_SSL.

Then the coordinator's tables belong to the database's owner, and that role is refused without
its password.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import urllib.parse
from pathlib import Path
from typing import Final

from testkit.netns import Host, NetworkFactory
from testkit.postgres import bindir_or_skip
from testkit.postgres_server import RUN_AS_WHEN_ROOT, PostgresServer
from testkit.s3server import create_bucket, running_s3_server
from testkit.tls import make_host_certs
from tests.netns._kafka_admin import wait_authorized
from tests.netns._kafka_cluster import HostBroker

README: Final = Path(__file__).resolve().parents[2] / "README.md"
SECTION: Final = "### A cluster on three hosts"
BLOCK: Final = re.compile(r"^( *)```([a-z]*)\n(.*?)^\1```", re.DOTALL | re.MULTILINE)
ADDRESS: Final = re.compile(r"\b10\.0\.0\.(\d+)\b")
S3_HOST, POSTGRES_HOST = 2, 3
BROKER_HOSTS: Final = (11, 12, 13)
COMMAND: Final = "-m diskless.kafka_server"
CLIENT_TIMEOUT_S: Final = 150.0
ORDERS: Final = 10


def _section() -> str:
    """The section's text, up to the next heading outside a code block."""
    lines = README.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip() == SECTION)
    fenced = False
    for end in range(start + 1, len(lines)):
        if lines[end].strip().startswith("```"):
            fenced = not fenced
        elif not fenced and lines[end].startswith("#"):
            break
    else:
        end = len(lines)
    return "".join(lines[start:end])


class Walkthrough:
    """The section's blocks, by what each is for (each found exactly where the README has it)."""

    def __init__(self, section: str) -> None:
        self.server_files: list[str] = []
        self.postgres_conf: list[str] = []
        self.pg_hba: list[str] = []
        self.sql: list[str] = []
        self.pgpass: list[str] = []
        self.commands: list[str] = []
        self.python: list[str] = []
        for _, language, body in BLOCK.findall(section):
            block = textwrap.dedent(body)
            header = block.splitlines()[0]
            if language == "python":
                self.python.append(block)
            elif language == "sql":
                self.sql.append(block)
            elif header.startswith("# /etc/diskless/server.properties"):
                self.server_files.append(block)
            elif header.startswith("# /etc/postgresql/") and "pg_hba.conf" in header:
                self.pg_hba.append(block)
            elif header.startswith("# /etc/postgresql/"):
                self.postgres_conf.append(block)
            elif header.startswith("# ~/.pgpass"):
                self.pgpass.append(block)
            elif COMMAND in block:
                self.commands.append(block)
        for kind in ("postgres_conf", "pg_hba", "sql", "pgpass", "commands"):
            assert len(getattr(self, kind)) == 1, (kind, getattr(self, kind))
        assert len(self.server_files) == len(BROKER_HOSTS), self.server_files
        assert len(self.python) >= 4, self.python

    def server_properties(self, address: int) -> str:
        """The file of the broker host 10.0.0.`address`: the first host's, with the lines of
        this host's (`the same, except`) in place of the first's."""
        base, *others = self.server_files
        assert f"on 10.0.0.{BROKER_HOSTS[0]}" in base.splitlines()[0], base
        if address == BROKER_HOSTS[0]:
            return base
        (own,) = [f for f in others if f"on 10.0.0.{address}:" in f.splitlines()[0]]
        assert "the same, except" in own.splitlines()[0], own
        changed = dict(_property(line) for line in own.splitlines()[1:] if line.strip())
        lines = []
        for line in base.splitlines():
            name = _property(line)[0] if line.strip() and not line.startswith("#") else None
            lines.append(f"{name}={changed.pop(name)}" if name in changed else line)
        assert not changed, f"lines of 10.0.0.{address} not in the first host's file: {changed}"
        return "\n".join(lines) + "\n"

    def statements(self) -> list[str]:
        (block,) = self.sql
        text = "\n".join(line for line in block.splitlines() if not line.startswith("--"))
        return [s.strip() for s in text.split(";") if s.strip()]

    def steps(self) -> tuple[str, str]:
        """The Python blocks as two scripts: the administrator's (up to the ACLs) and the
        user's."""
        last = next(i for i, block in enumerate(self.python) if "create_acls" in block)
        return "\n".join(self.python[: last + 1]), "\n".join(self.python[last + 1 :])

    def command(self) -> list[str]:
        (block,) = self.commands
        return shlex.split(block.replace("\\\n", " "))


def _property(line: str) -> tuple[str, str]:
    name, _, value = line.partition("=")
    return name.strip(), value.strip()


class Substitution:
    """The README's addresses and paths to the test's, one host at a time."""

    def __init__(self, hosts: dict[int, Host], ports: dict[int, int], paths: dict[str, str]):
        self._hosts = hosts
        self._ports = ports
        self._paths = paths

    def __call__(self, text: str, **paths: str) -> str:
        for readme, port in self._ports.items():
            text = re.sub(rf"\b10\.0\.0\.{readme}:\d+\b", f"10.0.0.{readme}:{port}", text)
        subnet = next(iter(self._hosts.values())).network.subnet
        text = text.replace("10.0.0.0/24", str(subnet))
        text = ADDRESS.sub(lambda m: self._hosts[int(m[1])].address, text)
        for readme, path in sorted({**self._paths, **paths}.items(), key=lambda p: -len(p[0])):
            text = text.replace(readme, path)
        return text


def _postgres(host: Host, walk: Walkthrough, certs: Path, sub: Substitution) -> PostgresServer:
    """A server in `host` that only the section's lines let anyone in from the network."""
    server = PostgresServer(bindir_or_skip(), listen=host.address, launcher=host.argv())
    try:
        for name in ("server.pem", "server.key"):
            shutil.copy(
                certs / f"broker-{host.address}.{name.rpartition('.')[2]}", server.root / name
            )
            if os.geteuid() == 0:
                user = pwd.getpwnam(RUN_AS_WHEN_ROOT)
                os.chown(server.root / name, user.pw_uid, user.pw_gid)
        (server.root / "server.key").chmod(0o600)
        paths = {f"/etc/postgresql/{n}": str(server.root / n) for n in ("server.pem", "server.key")}
        with open(server.data / "postgresql.conf", "a") as conf:
            conf.write(sub(walk.postgres_conf[0], **paths))
        with open(server.data / "pg_hba.conf", "a") as hba:
            hba.write(sub(walk.pg_hba[0]))
        server.stop()
        server.start()
        for statement in walk.statements():
            server.sql(statement)
    except BaseException:
        server.close()
        raise
    return server


def _psql(
    host: Host, dsn: str, statement: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    argv = [str(bindir_or_skip() / "psql"), dsn, "-w", "-At", "-c", statement]
    return host.run(argv, capture_output=True, text=True, timeout=30, env={**os.environ, **env})


def test_the_readme_s_three_host_cluster_runs_as_written(
    network_of: NetworkFactory, tmp_path: Path
) -> None:
    walk = Walkthrough(_section())
    net = network_of(2 + len(BROKER_HOSTS) + 1)
    s3_host, pg_host, *broker_hosts, client = net.hosts
    hosts = {
        S3_HOST: s3_host,
        POSTGRES_HOST: pg_host,
        **dict(zip(BROKER_HOSTS, broker_hosts, strict=True)),
    }
    certs = make_host_certs(tmp_path / "certs", [h.address for h in hosts.values()])
    tls = str(certs.keystores[s3_host.address]).replace("-keystore", "")
    key = tls.replace(".pem", ".key")
    with running_s3_server(s3_host.address, start_in=s3_host.call, tls=(tls, key)) as endpoint:
        s3_port = int(endpoint.rpartition(":")[2])
        s3_host.call(asyncio.run, create_bucket(endpoint, "kafka", verify=str(certs.ca)))
        before = Substitution(hosts, {S3_HOST: s3_port}, {"/etc/diskless/ca.pem": str(certs.ca)})
        server = _postgres(pg_host, walk, tmp_path / "certs", before)
        try:
            sub = Substitution(
                hosts,
                {S3_HOST: s3_port, POSTGRES_HOST: server.port},
                {"/etc/diskless/ca.pem": str(certs.ca), ".venv/bin/python": sys.executable},
            )
            _run(walk, sub, broker_hosts, client, tmp_path, certs.keystores)
            _check_postgres(walk, sub, server, broker_hosts[0], tmp_path)
        finally:
            server.close()


def _run(
    walk: Walkthrough,
    sub: Substitution,
    broker_hosts: list[Host],
    client: Host,
    tmp_path: Path,
    keystores: dict[str, Path],
) -> None:
    brokers: list[HostBroker] = []
    try:
        for readme, host in zip(BROKER_HOSTS, broker_hosts, strict=True):
            directory = tmp_path / f"host-{readme}"
            (directory / "home").mkdir(parents=True)
            pgpass = directory / "home" / ".pgpass"
            pgpass.write_text(_without_comments(sub(walk.pgpass[0])))
            pgpass.chmod(0o600)
            paths = {
                "/etc/diskless/server.properties": str(directory / "server.properties"),
                "/etc/diskless/broker.pem": str(keystores[host.address]),
            }
            properties = sub(walk.server_properties(readme), **paths)
            (directory / "server.properties").write_text(properties)
            node_id = int(dict(_property(line) for line in properties.splitlines()
                               if line and not line.startswith("#"))["node.id"])  # fmt: skip
            argv = [sub(word, **paths) for word in walk.command()]
            log = directory / "broker.log"
            brokers.append(HostBroker(host, node_id, argv, log, {"HOME": str(directory / "home")}))
        for broker in brokers:
            broker.wait_started()
        administrator, user = walk.steps()
        _python(client, sub(administrator), brokers)
        # Step 4 starts once every broker has read the ACLs, as it says.
        ca = Path(sub("/etc/diskless/ca.pem"))
        wait_authorized(client, [b.address for b in brokers], ca)
        out = _python(client, sub(user), brokers)
        assert f"{ORDERS} orders read" in out.stdout, out.stdout
        assert re.search(rf"order {ORDERS} at offset \d+ of partition \d+", out.stdout), out.stdout
        for broker in brokers:
            assert broker.running(), broker.log_tail()
    finally:
        for broker in brokers:
            broker.kill()


def _python(
    client: Host, script: str, brokers: list[HostBroker]
) -> subprocess.CompletedProcess[str]:
    out = client.python(script, timeout=CLIENT_TIMEOUT_S, check=False)
    print(out.stdout)
    logs = "\n".join(f"broker {b.node_id}:\n{b.log_tail()}" for b in brokers)
    assert out.returncode == 0, f"{out.stdout}\n{out.stderr}\n{logs}"
    return out


def _without_comments(text: str) -> str:
    return "".join(line + "\n" for line in text.splitlines() if not line.startswith("#"))


def _check_postgres(
    walk: Walkthrough, sub: Substitution, server: PostgresServer, host: Host, tmp_path: Path
) -> None:
    """The coordinator's tables are the owner role's; that role needs its password, over TLS."""
    dsn = next(w for w in (sub(word) for word in walk.command()) if w.startswith("postgresql://"))
    url = urllib.parse.urlsplit(dsn)
    tables = "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'"
    assert server.sql(tables, database=url.path.strip("/")).split() == [url.username]
    nowhere = {"PGPASSFILE": str(tmp_path / "no-such-file"), "HOME": str(tmp_path)}
    refused = _psql(host, dsn, "SELECT 1", nowhere)
    assert refused.returncode != 0 and "password" in refused.stderr, refused.stderr
    passfile = {"PGPASSFILE": str(tmp_path / f"host-{BROKER_HOSTS[0]}" / "home" / ".pgpass")}
    plain = dsn.replace("sslmode=verify-full", "sslmode=disable")
    refused = _psql(host, plain, "SELECT 1", passfile)
    assert refused.returncode != 0 and "no encryption" in refused.stderr, refused.stderr
    accepted = _psql(host, dsn, "SELECT current_user", passfile)
    assert accepted.stdout.split() == [url.username], accepted.stderr
