"""Analysis in Spark: throughput, latency percentiles, objects written, commit latency.

Latency is per produce request (one broker call): from the producer handing it to the broker to
the broker's answer, so it includes WAL buffering, upload and commit. Throughput counts only
acknowledged batches, over the window from the first send to the last answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec

from benchmarks.harness.execute import KIND_BATCH, ResultRow, TaskStats
from benchmarks.harness.spec import MB

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

QUANTILES: Final = (0.5, 0.95, 0.99, 0.999)
QUANTILE_NAMES: Final = ("p50", "p95", "p99", "p999")


class Latency(msgspec.Struct, frozen=True, kw_only=True):
    count: int
    mean: float
    p50: float
    p95: float
    p99: float
    p999: float
    max: float


class ObjectSizes(msgspec.Struct, frozen=True, kw_only=True):
    count: int
    total_bytes: int
    mean_bytes: float
    p50_bytes: float
    p90_bytes: float
    max_bytes: int
    min_bytes: int


class Analysis(msgspec.Struct, frozen=True, kw_only=True):
    batches_sent: int
    batches_acked: int
    batches_failed: int
    records_acked: int
    bytes_acked: int
    requests_sent: int
    requests_failed: int
    duration_s: float
    mb_per_s: float
    batches_per_s: float
    requests_per_s: float
    records_per_s: float
    latency_ms: Latency
    latency_ms_by_broker: dict[str, Latency]
    latency_ms_by_producer_kind: dict[str, Latency]
    """Requests of idempotent and of transactional producers."""
    throughput_by_second: list[tuple[int, float]]
    """(second since the first send, MB acknowledged in that second)."""
    all_active_s: float
    """From the first send until the first producer ran out of requests: every producer busy."""
    all_active_mb_per_s: float
    """Acknowledged MB per second within `all_active_s` (the sustained figure: afterwards fewer
    and fewer producers keep the brokers busy, so the whole-run average understates capacity)."""
    objects: ObjectSizes
    object_sizes: list[int]
    commit_ms: Latency
    batches_per_commit: float
    upload_ms: Latency
    request_latencies_ms: list[float]
    """Every request's latency, sorted (for the CDF plot)."""


def _latency_from_row(row: Any) -> Latency:
    quantiles = list(row["q"]) if row["q"] is not None else [0.0] * len(QUANTILES)
    return Latency(
        count=int(row["n"]),
        mean=float(row["mean"] or 0.0),
        **{name: float(q) for name, q in zip(QUANTILE_NAMES, quantiles, strict=True)},
        max=float(row["max"] or 0.0),
    )


def _latency_aggregates(column: str) -> list[Any]:
    from pyspark.sql import functions as F

    quantiles = ", ".join(str(q) for q in QUANTILES)
    return [
        F.count(column).alias("n"),
        F.mean(column).alias("mean"),
        F.expr(f"percentile({column}, array({quantiles}))").alias("q"),
        F.max(column).alias("max"),
    ]


def _series_aggregates(spark: SparkSession, series: dict[str, Sequence[float]]) -> list[Any]:
    """Count, mean, percentiles (the latency quantiles, then p90), max, min and sum per series."""
    from pyspark.sql import functions as F

    values = [(kind, float(v)) for kind, vs in series.items() for v in vs]
    if not values:
        return []
    quantiles = ", ".join(str(q) for q in (0.5, 0.9, *QUANTILES[1:]))
    frame = spark.createDataFrame(values, "kind string, v double")
    rows = (
        frame.groupBy("kind")
        .agg(
            F.count("v").alias("n"),
            F.mean("v").alias("mean"),
            F.expr(f"percentile(v, array({quantiles}))").alias("q"),
            F.max("v").alias("max"),
            F.min("v").alias("min"),
            F.sum("v").alias("total"),
        )
        .collect()
    )
    out = []
    for row in rows:
        q = list(row["q"])
        # Latency rows want (p50, p95, p99, p999); object rows want (p50, p90).
        fields = row.asDict()
        fields["q"] = [q[0], q[1]] if row["kind"] == "objects" else [q[0], *q[2:]]
        out.append(fields)
    return out


def analyze(
    spark: SparkSession,
    results: DataFrame,
    batch_rows: Sequence[ResultRow],
    tasks: Sequence[TaskStats],
    objects: Sequence[tuple[str, int]],
) -> Analysis:
    """The run's figures; `batch_rows` (the rows `results` was made from) feed only the plots."""
    from pyspark.sql import functions as F

    batches = results.filter(F.col("kind") == "batch")
    ok = F.col("error") == 0
    totals = batches.agg(
        F.count("*").alias("sent"),
        F.sum(ok.cast("int")).alias("acked"),
        F.sum(F.when(ok, F.col("records")).otherwise(0)).alias("records"),
        F.sum(F.when(ok, F.col("batch_bytes")).otherwise(0)).alias("bytes"),
        F.min("send_ts").alias("t0"),
        F.max("ack_ts").alias("t1"),
    ).first()
    assert totals is not None
    sent = int(totals["sent"])
    acked = int(totals["acked"] or 0)
    t0 = float(totals["t0"] or 0.0)
    duration = max(float(totals["t1"] or 0.0) - t0, 1e-9)

    # One job for every request latency figure: per broker, and overall (the rollup's null row).
    requests = batches.groupBy("request_id").agg(
        F.first("broker_id").alias("broker_id"),
        F.first("latency_ms").alias("latency_ms"),
        F.min(ok.cast("int")).alias("ok"),
        F.max((F.col("txn_index") >= 0).cast("int")).alias("transactional"),
    )
    requests.cache()
    by_kind = {
        ("transactional" if row["transactional"] else "idempotent"): _latency_from_row(row)
        for row in requests.groupBy("transactional")
        .agg(*_latency_aggregates("latency_ms"))
        .collect()
    }
    rolled = (
        requests.rollup("broker_id")
        .agg(*_latency_aggregates("latency_ms"), F.sum(1 - F.col("ok")).alias("failed"))
        .collect()
    )
    requests.unpersist()
    overall = next(row for row in rolled if row["broker_id"] is None)
    per_broker = {
        str(row["broker_id"]): _latency_from_row(row)
        for row in sorted(
            (row for row in rolled if row["broker_id"] is not None),
            key=lambda row: int(row["broker_id"]),
        )
    }

    # Sustained: while every producer still had requests to send.
    end_row = (
        batches.groupBy("producer_id").agg(F.max("ack_ts").alias("done")).agg(F.min("done")).first()
    )
    all_active_end = float(end_row[0]) if end_row is not None and end_row[0] is not None else t0
    all_active_s = max(all_active_end - t0, 1e-9)
    bytes_row = (
        batches.filter(ok & (F.col("ack_ts") <= F.lit(all_active_end)))
        .agg(F.sum("batch_bytes"))
        .first()
    )
    all_active_bytes = int(bytes_row[0] or 0) if bytes_row is not None else 0

    by_second = (
        batches.filter(ok)
        .groupBy(F.floor(F.col("ack_ts") - F.lit(t0)).cast("int").alias("second"))
        .agg(F.sum("batch_bytes").alias("bytes"))
        .orderBy("second")
        .collect()
    )

    # One job for the three plain series: object sizes, commit and upload latencies.
    commit_ms = [ms for task in tasks for ms in task.commit_ms]
    put_ms = [ms for task in tasks for ms in task.put_ms]
    sizes = [size for _, size in objects]
    series = {
        row["kind"]: row
        for row in _series_aggregates(
            spark, {"objects": [float(s) for s in sizes], "commit": commit_ms, "upload": put_ms}
        )
    }
    object_row = series.get("objects")
    if object_row is not None:
        object_sizes = ObjectSizes(
            count=int(object_row["n"]),
            total_bytes=round(object_row["total"]),
            mean_bytes=float(object_row["mean"]),
            p50_bytes=float(object_row["q"][0]),
            p90_bytes=float(object_row["q"][1]),
            max_bytes=round(object_row["max"]),
            min_bytes=round(object_row["min"]),
        )
    else:
        object_sizes = ObjectSizes(
            count=0,
            total_bytes=0,
            mean_bytes=0.0,
            p50_bytes=0.0,
            p90_bytes=0.0,
            max_bytes=0,
            min_bytes=0,
        )
    no_latency = Latency(count=0, mean=0.0, p50=0.0, p95=0.0, p99=0.0, p999=0.0, max=0.0)
    commit_batches = [n for task in tasks for n in task.commit_batches]
    per_second = [(int(r["second"]), int(r["bytes"]) / MB) for r in by_second]
    requests_sent = int(overall["n"])
    latencies = sorted(
        {row.request_id: row.latency_ms for row in batch_rows if row.kind == KIND_BATCH}.values()
    )
    return Analysis(
        batches_sent=sent,
        batches_acked=acked,
        batches_failed=sent - acked,
        records_acked=int(totals["records"] or 0),
        bytes_acked=int(totals["bytes"] or 0),
        requests_sent=requests_sent,
        requests_failed=int(overall["failed"] or 0),
        duration_s=duration,
        mb_per_s=int(totals["bytes"] or 0) / MB / duration,
        batches_per_s=acked / duration,
        requests_per_s=requests_sent / duration,
        records_per_s=int(totals["records"] or 0) / duration,
        latency_ms=_latency_from_row(overall),
        latency_ms_by_broker=per_broker,
        latency_ms_by_producer_kind=dict(sorted(by_kind.items())),
        throughput_by_second=per_second,
        all_active_s=all_active_s,
        all_active_mb_per_s=all_active_bytes / MB / all_active_s,
        objects=object_sizes,
        object_sizes=sorted(sizes),
        commit_ms=_latency_from_row(series["commit"]) if "commit" in series else no_latency,
        batches_per_commit=sum(commit_batches) / len(commit_batches) if commit_batches else 0.0,
        upload_ms=_latency_from_row(series["upload"]) if "upload" in series else no_latency,
        request_latencies_ms=latencies,
    )
