"""The PostgreSQL store's apply of transaction and group state, beside `postgres_step`'s: the
rows of Kafka's transaction coordinator, consumer group coordinator and the commit barrier, and
the share-partition states of share groups (KIP-932)."""

from __future__ import annotations

import asyncpg

from diskless._types import TopicPartition
from diskless.coordinator._backends.postgres_rows import EPOCH_ANY, columns, two_columns
from diskless.coordinator._backends.sql_rows import scram_to_row, txn_to_row
from diskless.coordinator._store import Changes, LoadingSnapshot, Needs


async def apply_txn_state(
    conn: asyncpg.Connection, changes: Changes, txns_seen: set[str], groups_seen: set[str]
) -> None:
    """Store the changes of transaction and group state: broker registrations, group owners,
    leases, committed offsets, transaction records and registrations. Keys in `txns_seen` and
    `groups_seen` were loaded (hence locked) and are UPDATEd; others are INSERTed, so that a
    concurrent insert of the same key fails instead of being overwritten."""
    if changes.broker_registrations:
        await conn.executemany(
            "INSERT INTO broker_registrations VALUES ($1, $2, $3, $4, $5, $6)"
            " ON CONFLICT (broker_id) DO UPDATE SET broker_epoch = excluded.broker_epoch,"
            " host = excluded.host, port = excluded.port, rack = excluded.rack,"
            " expires_ms = excluded.expires_ms",
            [
                (r.broker_id, r.broker_epoch, r.host, r.port, r.rack, r.expires_ms)
                for r in changes.broker_registrations.values()
            ],
        )
    for group_id, o in sorted(changes.groups.items()):
        # A group's first owner is INSERTed: of two first claims, the second fails on the
        # key (and runs again, finding the first's owner) instead of overwriting it.
        if group_id in groups_seen:
            await conn.execute(
                "UPDATE group_owners SET broker_id = $2, broker_epoch = $3, generation = $4"
                " WHERE group_id = $1",
                group_id, o.broker_id, o.broker_epoch, o.generation,
            )  # fmt: skip
        else:
            await conn.execute(
                "INSERT INTO group_owners VALUES ($1, $2, $3, $4)",
                group_id, o.broker_id, o.broker_epoch, o.generation,
            )  # fmt: skip
            groups_seen.add(group_id)
    if changes.broker_leases_dropped:
        await conn.execute(
            "DELETE FROM txn_leases l USING unnest($1::int[], $2::bigint[]) k(id, epoch)"
            " WHERE l.broker_id = k.id AND l.broker_epoch < k.epoch",
            *two_columns(sorted(changes.broker_leases_dropped.items())),
        )
    if changes.group_offsets:
        await conn.execute(
            "INSERT INTO group_offsets SELECT * FROM unnest($1::text[], $2::text[],"
            " $3::int[], $4::bigint[], $5::text[], $6::int[])"
            " ON CONFLICT (group_id, topic, partition)"
            " DO UPDATE SET committed_offset = excluded.committed_offset,"
            " metadata = excluded.metadata, leader_epoch = excluded.leader_epoch",
            *columns(
                [
                    (group_id, tp.topic, tp.partition, *committed)
                    for (group_id, tp), committed in changes.group_offsets.items()
                ],
                6,
            ),
        )
    if deleted := changes.group_offsets_deleted:
        await conn.execute(
            "DELETE FROM group_offsets f USING unnest($1::text[], $2::text[], $3::int[])"
            " k(group_id, topic, partition) WHERE f.group_id = k.group_id"
            " AND f.topic = k.topic AND f.partition = k.partition",
            *columns([(group_id, tp.topic, tp.partition) for group_id, tp in deleted], 3),
        )
    if changes.group_offsets_cleared:
        await conn.execute(
            "DELETE FROM group_offsets WHERE group_id = ANY($1::text[])",
            sorted(changes.group_offsets_cleared),
        )
    if changes.txns:
        rows = [txn_to_row(record) for record in changes.txns.values()]
        updates = [row for row in rows if row[0] in txns_seen]
        inserts = [row for row in rows if row[0] not in txns_seen]
        if updates:
            await conn.execute(
                "UPDATE txn_records r SET record = k.record, due_ms = k.due"
                " FROM unnest($1::text[], $2::bytea[], $3::bigint[]) k(id, record, due)"
                " WHERE r.transactional_id = k.id",
                *columns(updates, 3),
            )
        if inserts:
            await conn.execute(
                "INSERT INTO txn_records SELECT * FROM unnest($1::text[], $2::bytea[],"
                " $3::bigint[])",
                *columns(inserts, 3),
            )
            txns_seen.update(row[0] for row in inserts)
    if changes.registrations:
        await conn.execute(
            "INSERT INTO txn_registrations SELECT * FROM unnest($1::bigint[], $2::bigint[],"
            " $3::int[], $4::boolean[], $5::int[], $6::int[])"
            " ON CONFLICT (partition_id, producer_id) DO UPDATE"
            " SET producer_epoch = excluded.producer_epoch, ending = excluded.ending,"
            " client_epoch = excluded.client_epoch, sequence_base = excluded.sequence_base",
            *columns(
                [
                    (key, pid, r.producer_epoch, r.ending, r.client_epoch, r.sequence_base)
                    for (key, pid), r in changes.registrations.items()
                ],
                6,
            ),
        )
    if changes.registrations_dropped:
        await conn.execute(
            "DELETE FROM txn_registrations r USING unnest($1::bigint[], $2::bigint[],"
            " $3::int[]) k(id, pid, epoch) WHERE r.partition_id = k.id"
            " AND r.producer_id = k.pid AND r.producer_epoch <= k.epoch",
            *columns([(key, pid, epoch) for (key, pid), epoch in changes.registrations_dropped], 3),
        )
    if changes.leases_released:
        await conn.execute(
            "DELETE FROM txn_leases WHERE lease_id = ANY($1::bigint[])",
            list(changes.leases_released),
        )
    if changes.leases_dropped:
        await conn.execute(
            "DELETE FROM txn_leases l USING unnest($1::bigint[], $2::bigint[], $3::int[])"
            " k(id, pid, epoch) WHERE l.partition_id = k.id AND l.producer_id = k.pid"
            " AND l.producer_epoch <= k.epoch",
            *columns(
                [
                    (key, pid, EPOCH_ANY if epoch is None else epoch)
                    for (key, pid), epoch in changes.leases_dropped
                ],
                3,
            ),
        )


async def apply_indexes(conn: asyncpg.Connection, changes: Changes) -> list[int]:
    """New leases (returning their ids, in order), then the ongoing and aborted indexes."""
    granted: list[int] = []
    if changes.leases_granted:
        granted = sorted(
            await conn.fetchval(
                "SELECT array_agg(nextval('txn_leases_lease_id_seq')) FROM generate_series(1, $1)",
                len(changes.leases_granted),
            )
        )
        await conn.execute(
            "INSERT INTO txn_leases (lease_id, partition_id, producer_id, producer_epoch,"
            " expires_ms, broker_id, broker_epoch) SELECT * FROM unnest($1::bigint[],"
            " $2::bigint[], $3::bigint[], $4::int[], $5::bigint[], $6::int[], $7::bigint[])",
            *columns(
                [
                    (
                        lease_id,
                        x.partition_key,
                        x.producer_id,
                        x.producer_epoch,
                        x.expires_ms,
                        x.broker_id,
                        x.broker_epoch,
                    )
                    for lease_id, x in zip(granted, changes.leases_granted, strict=True)
                ],
                7,
            ),
        )
    if changes.ongoing_opened:
        await conn.execute(
            "INSERT INTO ongoing_txns SELECT * FROM unnest($1::bigint[], $2::bigint[],"
            " $3::bigint[])",
            *columns(changes.ongoing_opened, 3),
        )
    if changes.ongoing_closed:
        await conn.execute(
            "DELETE FROM ongoing_txns o USING unnest($1::bigint[], $2::bigint[]) k(id, off)"
            " WHERE o.partition_id = k.id AND o.first_offset = k.off",
            *two_columns(changes.ongoing_closed),
        )
    if changes.aborted:
        await conn.execute(
            "INSERT INTO aborted_txns SELECT * FROM unnest($1::bigint[], $2::bigint[],"
            " $3::bigint[], $4::bigint[], $5::bigint[])",
            *columns(
                [
                    (key, a.last_offset, a.producer_id, a.first_offset, a.last_stable_offset)
                    for key, a in changes.aborted
                ],
                5,
            ),
        )
    return granted


async def apply_scram(conn: asyncpg.Connection, changes: Changes) -> None:
    """Store or delete SCRAM credentials. Of two concurrent first upsertions of one key, the
    later one wins, as it would had they run one after the other."""
    deleted = [(u, int(m)) for (u, m), c in changes.scram.items() if c is None]
    if deleted:
        await conn.executemany(
            "DELETE FROM scram_credentials WHERE user_name = $1 AND mechanism = $2", deleted
        )
    stored = [scram_to_row(k, c) for k, c in sorted(changes.scram.items()) if c is not None]
    if stored:
        await conn.executemany(
            "INSERT INTO scram_credentials VALUES ($1, $2, $3, $4, $5, $6)"
            " ON CONFLICT (user_name, mechanism) DO UPDATE SET salt = excluded.salt,"
            " stored_key = excluded.stored_key, server_key = excluded.server_key,"
            " iterations = excluded.iterations",
            stored,
        )


async def load_share_states(
    conn: asyncpg.Connection,
    needs: Needs,
    loaded: LoadingSnapshot,
    seen: set[tuple[str, TopicPartition]],
) -> None:
    """The share-partition states `needs` names, locked (`FOR UPDATE`), into `loaded`; the
    keys found are added to `seen`."""
    wanted = sorted(needs.share_partitions)
    for group_id, topic, index, blob in await conn.fetch(
        "SELECT s.group_id, s.topic, s.partition, s.state FROM share_states s"
        " JOIN unnest($1::text[], $2::text[], $3::int[]) k(g, t, p)"
        " ON s.group_id = k.g AND s.topic = k.t AND s.partition = k.p"
        " ORDER BY s.group_id, s.topic, s.partition FOR UPDATE OF s",
        [g for g, _ in wanted],
        [tp.topic for _, tp in wanted],
        [tp.partition for _, tp in wanted],
    ):
        key = (group_id, TopicPartition(topic, index))
        loaded.share_states[key] = bytes(blob)
        seen.add(key)


async def apply_group_states(
    conn: asyncpg.Connection, changes: Changes, seen: set[tuple[str, TopicPartition]]
) -> None:
    """Consumer-protocol groups' states, replaced or deleted; and share-partition states: those
    loaded (hence locked, in `seen`) are UPDATEd, others INSERTed, so that of two steps that
    both found one absent the second fails on the unique key and runs again (see
    `postgres_step`)."""
    if changes.group_states:
        await conn.executemany(
            "INSERT INTO group_states VALUES ($1, $2)"
            " ON CONFLICT (group_id) DO UPDATE SET state = excluded.state",
            sorted(changes.group_states.items()),
        )
    if changes.group_states_deleted:
        await conn.execute(
            "DELETE FROM group_states WHERE group_id = ANY($1::text[])",
            sorted(changes.group_states_deleted),
        )
    for group_id in changes.share_groups_deleted:
        await conn.execute("DELETE FROM share_states WHERE group_id = $1", group_id)
    rows = sorted((g, tp.topic, tp.partition, b) for (g, tp), b in changes.share_states.items())
    if changed := [row for row in rows if (row[0], TopicPartition(row[1], row[2])) in seen]:
        await conn.executemany(
            "UPDATE share_states SET state = $4"
            " WHERE group_id = $1 AND topic = $2 AND partition = $3",
            changed,
        )
    if added := [row for row in rows if (row[0], TopicPartition(row[1], row[2])) not in seen]:
        await conn.executemany("INSERT INTO share_states VALUES ($1, $2, $3, $4)", added)
        seen.update((row[0], TopicPartition(row[1], row[2])) for row in added)
