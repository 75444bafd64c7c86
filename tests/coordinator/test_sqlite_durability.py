"""SQLite durability: SIGKILL at random moments loses nothing acknowledged and leaves no partial
commit; several processes committing to one file never share or skip an offset."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ._sqlite_child import LINE_END, PARTITIONS, TOPIC

ROOT = Path(__file__).resolve().parents[2]
KILLS_DEFAULT = 8
KILLS_SLOW = 200
"""Kills of the default and of the slow test: the second child is killed while it opens the
database, later ones now and then too (one in five), the others while they commit."""
STARTUP_S_MAX = 30.0


def _spawn(
    db: Path, journal: Path, broker_id: int, seed: int, commits: int
) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.coordinator._sqlite_child",
            str(db),
            str(journal),
            str(broker_id),
            str(seed),
            str(commits),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


def _read_journal(journal: Path) -> tuple[dict[str, int], dict[str, list[list[int]]]]:
    """Intents (key -> batch count) and acknowledgements (key -> results). A process may die
    while writing a line, and its successor appends after the torn bytes, so only lines that
    carry the end marker are trusted."""
    intents: dict[str, int] = {}
    acks: dict[str, list[list[int]]] = {}
    if not journal.exists():
        return intents, acks
    for line in journal.read_text().split("\n"):
        if not line.endswith(LINE_END):
            continue
        kind, key, payload = line.removesuffix(LINE_END).split(" ", 2)
        if kind == "I":
            intents[key] = int(payload)
        else:
            acks[key] = json.loads(payload)
    return intents, acks


def _check_database(db: Path, journals: list[Path]) -> int:
    """Every acknowledged commit is present, every commit is whole, offsets are contiguous."""
    intents: dict[str, int] = {}
    acks: dict[str, list[list[int]]] = {}
    for journal in journals:
        more_intents, more_acks = _read_journal(journal)
        intents.update(more_intents)
        acks.update(more_acks)
    conn = sqlite3.connect(db)
    try:
        batches_by_key: dict[str, list[tuple[int, int, int]]] = {}
        for key, partition, base, last in conn.execute(
            "SELECT f.key, p.partition, b.base_offset, b.last_offset FROM batches b"
            " JOIN files f ON f.file_id = b.file_id JOIN partitions p"
            " ON p.partition_id = b.partition_id"
        ):
            batches_by_key.setdefault(key, []).append((partition, base, last))
        files = {key: state for key, state in conn.execute("SELECT key, state FROM files")}
        for key, results in acks.items():
            assert files.get(key) == 0, f"acknowledged commit {key} lost"
            expected = sorted(
                (p, base, base + n - 1) for p, base, n, error in results if error == 0
            )
            assert sorted(batches_by_key[key]) == expected, key
        for key, stored in batches_by_key.items():
            assert len(stored) == intents[key], f"partial commit {key}"
        for key in intents.keys() - acks.keys():
            # In flight when killed: all of it or none of it.
            assert len(batches_by_key.get(key, [])) in (0, intents[key]), key
        for (partition_id,) in conn.execute("SELECT partition_id FROM partitions").fetchall():
            hwm, start = conn.execute(
                "SELECT high_watermark, log_start_offset FROM partitions WHERE partition_id = ?",
                (partition_id,),
            ).fetchone()
            expected_base = start
            for base, last in conn.execute(
                "SELECT base_offset, last_offset FROM batches WHERE partition_id = ?"
                " ORDER BY base_offset",
                (partition_id,),
            ):
                assert base == expected_base, (partition_id, base, expected_base)
                expected_base = last + 1
            assert expected_base == hwm, (partition_id, expected_base, hwm)
        return len(acks)
    finally:
        conn.close()


def _crash_loop(tmp_path: Path, kills: int) -> None:
    seed = random.randrange(2**32)
    print(f"crash test seed: {seed}")
    rng = random.Random(seed)
    db, journal = tmp_path / "crash.db", tmp_path / "journal"
    acked_total = 0
    in_flight_kills = opening_kills = 0
    for kill in range(kills):
        child = _spawn(db, journal, broker_id=1, seed=seed + kill, commits=0)
        try:
            assert child.stdout is not None
            if kill == 1 or (kill > 1 and rng.random() < 0.2):
                # Now and then while it opens the database (connection set-up, migrations).
                opening_kills += 1
                time.sleep(rng.uniform(0.0, 0.3))
            else:
                assert child.stdout.readline().strip() == "ready"
                time.sleep(rng.uniform(0.0, 0.25))
                assert child.poll() is None, "the child died on its own"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            if child.stdout is not None:
                child.stdout.close()
        acked = _check_database(db, [journal])
        assert acked >= acked_total
        acked_total = acked
        intents, acks = _read_journal(journal)
        in_flight_kills = len(intents) - len(acks)
    print(
        f"{kills} kills ({opening_kills} while opening), {acked_total} acknowledged commits"
        f" verified, {in_flight_kills} kills with a commit in flight"
    )
    assert acked_total > 0


def test_sigkill_loses_no_acknowledged_commit(tmp_path: Path) -> None:
    _crash_loop(tmp_path, KILLS_DEFAULT)


@pytest.mark.slow
def test_sigkill_many_times(tmp_path: Path) -> None:
    _crash_loop(tmp_path, KILLS_SLOW)


def test_processes_share_one_database(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    journals = [tmp_path / f"journal-{i}" for i in range(3)]
    children = [_spawn(db, journals[i], broker_id=i, seed=i, commits=40) for i in range(3)]
    for child in children:
        try:
            assert child.wait(timeout=120) == 0
        finally:
            if child.stdout is not None:
                child.stdout.close()
    ranges: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    for journal in journals:
        intents, acks = _read_journal(journal)
        assert len(acks) == len(intents) == 40
        for results in acks.values():
            for partition, base, count, error in results:
                assert error == 0
                ranges[partition].append((base, base + count))
    for partition, spans in ranges.items():
        spans.sort()
        assert spans and spans[0][0] == 0, partition
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start == end, (partition, start, end)  # no gap, no overlap
    assert _check_database(db, journals) == 3 * 40
    conn = sqlite3.connect(db)
    try:
        ((topic_count,),) = conn.execute("SELECT count(*) FROM topics WHERE name = ?", (TOPIC,))
        assert topic_count == 1
    finally:
        conn.close()
