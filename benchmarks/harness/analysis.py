"""Analysis in Spark: throughput, latency percentiles, objects written, commit latency.

Latency is per produce request (one broker call): from the producer handing it to the broker to
the broker's answer, so it includes WAL buffering, upload and commit. Throughput counts only
acknowledged batches, over the window from the first send to the last answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec

from benchmarks.harness.execute import TaskStats
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
    throughput_by_second: list[tuple[int, float]]
    """(second since the first send, MB acknowledged in that second)."""
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


def latency_of(spark: SparkSession, values: Sequence[float]) -> Latency:
    """Percentiles of plain values (commit and upload latencies), computed by Spark too."""
    if not values:
        return Latency(count=0, mean=0.0, p50=0.0, p95=0.0, p99=0.0, p999=0.0, max=0.0)
    frame = spark.createDataFrame([(float(v),) for v in values], "ms double")
    return _latency_from_row(frame.agg(*_latency_aggregates("ms")).first())


def analyze(
    spark: SparkSession,
    results: DataFrame,
    tasks: Sequence[TaskStats],
    objects: Sequence[tuple[str, int]],
) -> Analysis:
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

    requests = batches.groupBy("request_id").agg(
        F.first("broker_id").alias("broker_id"),
        F.first("latency_ms").alias("latency_ms"),
        F.min(ok.cast("int")).alias("ok"),
    )
    requests.cache()
    request_totals = requests.agg(
        F.count("*").alias("n"), F.sum(1 - F.col("ok")).alias("failed")
    ).first()
    assert request_totals is not None
    overall = requests.agg(*_latency_aggregates("latency_ms")).first()
    per_broker = {
        str(row["broker_id"]): _latency_from_row(row)
        for row in requests.groupBy("broker_id")
        .agg(*_latency_aggregates("latency_ms"))
        .orderBy("broker_id")
        .collect()
    }
    latencies = sorted(float(r[0]) for r in requests.select("latency_ms").collect())
    requests.unpersist()

    by_second = (
        batches.filter(ok)
        .groupBy(F.floor(F.col("ack_ts") - F.lit(t0)).cast("int").alias("second"))
        .agg(F.sum("batch_bytes").alias("bytes"))
        .orderBy("second")
        .collect()
    )

    sizes = [size for _, size in objects]
    if sizes:
        frame = spark.createDataFrame([(int(s),) for s in sizes], "size long")
        row = frame.agg(
            F.count("*").alias("n"),
            F.sum("size").alias("total"),
            F.mean("size").alias("mean"),
            F.expr("percentile(size, array(0.5, 0.9))").alias("q"),
            F.max("size").alias("max"),
            F.min("size").alias("min"),
        ).first()
        assert row is not None
        object_sizes = ObjectSizes(
            count=int(row["n"]),
            total_bytes=int(row["total"]),
            mean_bytes=float(row["mean"]),
            p50_bytes=float(row["q"][0]),
            p90_bytes=float(row["q"][1]),
            max_bytes=int(row["max"]),
            min_bytes=int(row["min"]),
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

    commit_ms = [ms for task in tasks for ms in task.commit_ms]
    commit_batches = [n for task in tasks for n in task.commit_batches]
    put_ms = [ms for task in tasks for ms in task.put_ms]
    requests_sent = int(request_totals["n"])
    return Analysis(
        batches_sent=sent,
        batches_acked=acked,
        batches_failed=sent - acked,
        records_acked=int(totals["records"] or 0),
        bytes_acked=int(totals["bytes"] or 0),
        requests_sent=requests_sent,
        requests_failed=int(request_totals["failed"] or 0),
        duration_s=duration,
        mb_per_s=int(totals["bytes"] or 0) / MB / duration,
        batches_per_s=acked / duration,
        requests_per_s=requests_sent / duration,
        records_per_s=int(totals["records"] or 0) / duration,
        latency_ms=_latency_from_row(overall),
        latency_ms_by_broker=per_broker,
        throughput_by_second=[(int(r["second"]), int(r["bytes"]) / MB) for r in by_second],
        objects=object_sizes,
        object_sizes=sorted(sizes),
        commit_ms=latency_of(spark, commit_ms),
        batches_per_commit=sum(commit_batches) / len(commit_batches) if commit_batches else 0.0,
        upload_ms=latency_of(spark, put_ms),
        request_latencies_ms=latencies,
    )
