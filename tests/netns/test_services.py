"""PostgreSQL and the S3 endpoint in an infrastructure host, used from the others: the layout of a
multi-host cluster test."""

from __future__ import annotations

import asyncio
import subprocess
import textwrap
from pathlib import Path

from testkit.netns import NetworkFactory, postgres_in, s3_server_in
from testkit.postgres import bindir_or_skip
from testkit.postgres_server import SUPERUSER

ASYNCPG_CLIENT = textwrap.dedent(
    """
    import asyncio, sys
    import asyncpg

    async def main():
        connection = await asyncpg.connect(sys.argv[1], timeout=5)
        try:
            row = await connection.fetchrow(
                "SELECT host(inet_server_addr()) AS server, host(inet_client_addr()) AS client"
            )
            print(row["server"], row["client"])
        finally:
            await connection.close()

    asyncio.run(main())
    """
)

S3_CLIENT = textwrap.dedent(
    """
    import sys
    import boto3
    from testkit.s3server import S3_CREDENTIALS

    s3 = boto3.client(
        "s3",
        endpoint_url=sys.argv[1],
        region_name=S3_CREDENTIALS["region"],
        aws_access_key_id=S3_CREDENTIALS["aws_access_key_id"],
        aws_secret_access_key=S3_CREDENTIALS["aws_secret_access_key"],
    )
    s3.create_bucket(Bucket="across")
    s3.put_object(Bucket="across", Key="from-" + sys.argv[2], Body=b"x")
    print(*(o["Key"] for o in s3.list_objects_v2(Bucket="across")["Contents"]))
    """
)


def psql(dsn: str, statement: str) -> list[str]:
    return [str(bindir_or_skip() / "psql"), dsn, "-v", "ON_ERROR_STOP=1", "-At", "-c", statement]


async def test_postgres_in_the_infra_host_serves_the_others(
    network_of: NetworkFactory, tmp_path: Path
) -> None:
    net = network_of(3)
    infra, broker, client = net.hosts
    with postgres_in(infra) as server:
        dsn = server.dsn(server.database(tmp_path, "across"))
        assert f"@{infra.address}:" in dsn
        addresses = "SELECT host(inet_server_addr()) || ' ' || host(inet_client_addr())"
        out = broker.run(psql(dsn, addresses), capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [infra.address, broker.address]
        out = await asyncio.to_thread(client.python, ASYNCPG_CLIENT, dsn)
        assert out.stdout.split() == [infra.address, client.address]
        # Not on the machine's own loopback (its unix socket is how the machine reaches it).
        local = f"postgresql://{SUPERUSER}@127.0.0.1:{server.port}/postgres"
        out = subprocess.run(psql(local, "SELECT 1"), capture_output=True, text=True, timeout=30)
        assert out.returncode != 0 and "refused" in out.stderr, out.stderr
        assert server.sql("SELECT 1").strip() == "1"

        net.cut_between(broker, infra)
        out = broker.run(
            psql(f"{dsn}?connect_timeout=1", "SELECT 1"), capture_output=True, text=True, timeout=30
        )
        assert out.returncode != 0
        out = client.run(psql(dsn, "SELECT 1"), capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == "1", out.stderr
        net.restore_between(broker, infra)
        out = broker.run(psql(dsn, "SELECT 1"), capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == "1", out.stderr


def test_the_s3_endpoint_in_the_infra_host_serves_the_others(network_of: NetworkFactory) -> None:
    net = network_of(2)
    infra, client = net.hosts
    with s3_server_in(infra) as endpoint:
        assert endpoint.startswith(f"http://{infra.address}:")
        out = client.python(S3_CLIENT, endpoint, client.address)
        assert out.stdout.split() == [f"from-{client.address}"]
