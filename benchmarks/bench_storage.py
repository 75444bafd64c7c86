"""PUT throughput of LocalObjectStore against a plain synchronous write + fsync of the same bytes.

    .venv/bin/python -m benchmarks.bench_storage [--dir DIR] [--seconds S]

Both sides write fresh files in the same directory and fsync them; the store adds a temp file,
a rename, a directory fsync and a hop to a worker thread. The ratio is the price of atomicity.
Sequential puts (one in flight) compare like with like; a concurrent run shows what overlapping
puts on the event loop recover.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

from diskless.storage import LocalObjectStore

MIB = 1024 * 1024
SIZES = (1 * MIB, 8 * MIB)
CASE_BYTES_MAX = 256 * MIB  # stop a case early on fast disks so the run stays short
CONCURRENCY = 8


def baseline(directory: Path, data: bytes, seconds: float) -> tuple[int, float]:
    """Objects written and elapsed seconds for plain open/write/fsync/close."""
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds and count * len(data) < CASE_BYTES_MAX:
        with open(directory / f"plain-{count}", "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        count += 1
    return count, time.perf_counter() - started


async def store_puts(
    store: LocalObjectStore, data: bytes, seconds: float, in_flight: int
) -> tuple[int, float]:
    """Objects put and elapsed seconds with `in_flight` concurrent writers."""
    count, started = 0, time.perf_counter()

    def keep_going() -> bool:
        return time.perf_counter() - started < seconds and count * len(data) < CASE_BYTES_MAX

    async def writer() -> None:
        nonlocal count
        while keep_going():
            key = f"bench/{count:08d}"
            count += 1
            await store.put(key, data)

    await asyncio.gather(*(writer() for _ in range(in_flight)))
    return count, time.perf_counter() - started


def fresh(directory: Path) -> Path:
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return directory


def report(label: str, size: int, count: int, elapsed: float, reference: float | None) -> float:
    mb_s = count * size / MIB / elapsed
    ratio = f"{mb_s / reference:6.2f}x" if reference else "     - "
    print(
        f"{label:<28} {size // MIB:>4} MiB {count / elapsed:10.1f} obj/s {mb_s:9.1f} MB/s {ratio}"
    )
    return mb_s


async def main(directory: Path, seconds: float, rounds: int) -> None:
    print(
        f"directory: {directory}  ({rounds} interleaved rounds, ~{seconds:.1f}s per case in all,"
        f" at most {CASE_BYTES_MAX // MIB} MiB per round)"
    )
    print(f"{'case':<28} {'size':>8} {'objects/s':>16} {'MB/s':>14} {'vs plain':>7}")
    budget = seconds / rounds
    for size in SIZES:
        data = os.urandom(size)
        # Interleave the cases so disk write-back from one does not bias only the next.
        totals = {"plain": [0, 0.0], "x1": [0, 0.0], f"x{CONCURRENCY}": [0, 0.0]}
        for _ in range(rounds):
            count, elapsed = baseline(fresh(directory / "case"), data, budget)
            totals["plain"][0] += count
            totals["plain"][1] += elapsed
            for in_flight in (1, CONCURRENCY):
                store = LocalObjectStore(fresh(directory / "case"))
                count, elapsed = await store_puts(store, data, budget, in_flight)
                totals[f"x{in_flight}"][0] += count
                totals[f"x{in_flight}"][1] += elapsed
        plain = report("plain write+fsync", size, int(totals["plain"][0]), totals["plain"][1], None)
        for in_flight in (1, CONCURRENCY):
            count, elapsed = totals[f"x{in_flight}"]
            report(f"LocalObjectStore.put x{in_flight}", size, int(count), elapsed, plain)
    shutil.rmtree(directory / "case", ignore_errors=True)


def run(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dir", type=Path, help="where to write (default: a temp directory)")
    parser.add_argument("--seconds", type=float, default=3.0, help="time budget per case")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repetitions")
    args = parser.parse_args(argv)
    if args.dir is not None:
        asyncio.run(main(args.dir, args.seconds, args.rounds))
        return
    with tempfile.TemporaryDirectory(prefix="bench-storage-") as scratch:
        asyncio.run(main(Path(scratch), args.seconds, args.rounds))


if __name__ == "__main__":
    run()
