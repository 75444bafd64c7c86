"""The consolidation phase: every committed batch of the run moves into consolidated objects.

It runs in one Spark task (an executor of the cluster, or the driver's local one), like the
read-back: the store and the coordinator are the run's shared ones. The consolidator runs with no
minimum age until a run finds nothing left to move; the coordinator's metadata is measured before
and after, and the read-back that follows (`verify`) then reads the consolidated objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Final

import msgspec

from benchmarks.harness.env import open_coordinator, open_store
from benchmarks.harness.placement import TaskPlace, here
from benchmarks.harness.spec import GB, RunSpec
from benchmarks.harness.verify import Verification
from diskless.coordinator import MetadataStats
from diskless.lifecycle import Consolidator, ConsolidatorConfig, ConsolidatorStats

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CONSOLIDATOR_NODE_ID: Final = 20_000
"""Written into the consolidated objects' names, far from the brokers' and the readers' ids."""
RUNS_MAX: Final = 100_000
"""Only against a consolidator that would never finish; each run moves up to 100 ranges."""


def kb_per_retained_gb(stats: MetadataStats) -> float | None:
    """The coordinator's metadata per retained GB (None: the backend cannot measure it)."""
    if stats.stored_bytes is None or stats.retained_bytes <= 0:
        return None
    return stats.stored_bytes / 1e3 / (stats.retained_bytes / GB)


class ConsolidationFigures(msgspec.Struct, frozen=True, kw_only=True):
    seconds: float
    runs: int
    stats: ConsolidatorStats
    """What the consolidator did over all its runs."""
    before: MetadataStats
    after: MetadataStats
    place: TaskPlace | None = None

    @property
    def mb_per_s(self) -> float:
        return self.stats.bytes_moved / 1e6 / self.seconds if self.seconds > 0 else 0.0


def consolidate_in_task(run: RunSpec) -> ConsolidationFigures:
    return asyncio.run(_consolidate(run))


async def _consolidate(run: RunSpec) -> ConsolidationFigures:
    store = open_store(run.store)
    coordinator = open_coordinator(run)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(store.close)
        stack.push_async_callback(coordinator.close)
        before = await coordinator.metadata_stats()
        consolidator = Consolidator(
            store, coordinator, ConsolidatorConfig(node_id=CONSOLIDATOR_NODE_ID, age_ms=0)
        )
        started = time.perf_counter()
        runs = 0
        while runs < RUNS_MAX:
            runs += 1
            outcome = await consolidator.run_once()
            if outcome.candidates == 0 or outcome.extents_committed == 0:
                break  # nothing left, or nothing moves any more (failures are counted)
        seconds = time.perf_counter() - started
        after = await coordinator.metadata_stats()
        return ConsolidationFigures(
            seconds=seconds,
            runs=runs,
            stats=consolidator.stats(),
            before=before,
            after=after,
            place=here(),
        )


def consolidate(spark: SparkSession, run: RunSpec) -> ConsolidationFigures:
    """Consolidate everything the run committed, in one Spark task."""
    (figures,) = spark.sparkContext.parallelize([run], 1).map(consolidate_in_task).collect()
    assert isinstance(figures, ConsolidationFigures)
    return figures


# --- the report's part --------------------------------------------------------------------------
METADATA_TARGET_KB_PER_GB: Final = 10.0
GETS_TARGET_PER_GB: Final = 200.0


class ConsolidationReport(msgspec.Struct, frozen=True, kw_only=True):
    figures: ConsolidationFigures
    verification: Verification
    """The read-back of the consolidated data, audited as the first one."""
    gets_per_gb_before: float
    """GETs per GB produced of the first (WAL) read-back."""
    gets_per_gb_after: float


def gets_of(verification: Verification) -> int:
    return verification.store.get("gets", 0) + verification.store.get("ranged_gets", 0)


def _kb(value: float | None) -> str:
    return "unmeasured" if value is None else f"{value:,.1f} KB"


def consolidation_lines(report: ConsolidationReport) -> list[str]:
    """Headline lines: what moved, and the figures before and after beside their targets."""
    f, v = report.figures, report.verification
    m = f.stats
    return [
        f"Consolidation: {m.bytes_moved / 1e6:,.1f} MB ({m.batches_moved:,} batches) into "
        f"{m.extents_committed:,} objects in {f.seconds:.1f} s ({f.mb_per_s:,.1f} MB/s); "
        f"metadata {_kb(kb_per_retained_gb(f.before))} -> {_kb(kb_per_retained_gb(f.after))} "
        f"per retained GB (target <= {METADATA_TARGET_KB_PER_GB:.0f} KB); cold read-back "
        f"{report.gets_per_gb_before:,.1f} -> {report.gets_per_gb_after:,.1f} GETs per GB "
        f"(target <= {GETS_TARGET_PER_GB:.0f})",
        f"Verification after consolidation: {'PASSED' if v.passed else 'FAILED'} "
        f"({v.read_records:,} records read back, {v.expected_records:,} acknowledged, "
        f"{v.partitions_failed} of {v.partitions} partitions failed)",
    ]


def consolidation_markdown(report: ConsolidationReport) -> list[str]:
    f = report.figures
    m = f.stats
    rows = [
        ("batch rows", f"{f.before.batch_rows:,}", f"{f.after.batch_rows:,}"),
        ("extent rows", f"{f.before.extent_rows:,}", f"{f.after.extent_rows:,}"),
        ("metadata stored", _bytes(f.before.stored_bytes), _bytes(f.after.stored_bytes)),
        (
            "metadata per retained GB",
            _kb(kb_per_retained_gb(f.before)),
            _kb(kb_per_retained_gb(f.after)),
        ),
        (
            "cold read-back GETs per GB",
            f"{report.gets_per_gb_before:,.1f}",
            f"{report.gets_per_gb_after:,.1f}",
        ),
    ]
    return [
        "## Consolidation",
        "",
        f"All {m.batches_moved:,} committed batches ({m.bytes_moved / 1e6:,.1f} MB) moved into "
        f"{m.extents_committed:,} consolidated objects ({m.bytes_uploaded / 1e6:,.1f} MB "
        f"uploaded) in {f.runs} consolidator runs, {f.seconds:.2f} s: {f.mb_per_s:,.1f} MB/s"
        + (f", on {f.place}" if f.place is not None else "")
        + f"; {m.swaps_refused} swaps refused, {m.failures} failures.",
        "",
        "| | before | after |",
        "|---|---|---|",
        *[f"| {name} | {before} | {after} |" for name, before, after in rows],
        "",
        f"Targets: metadata <= {METADATA_TARGET_KB_PER_GB:.0f} KB per retained GB, cold "
        f"read-back <= {GETS_TARGET_PER_GB:.0f} GETs per GB. Each consolidated object holds "
        "one partition's data, so the figures after improve with the data per partition.",
        "",
    ]


def _bytes(value: int | None) -> str:
    return "unmeasured" if value is None else f"{value:,} B"
