"""What a benchmark run is made of: the workload, the environment it runs in, and price rates.

Everything here is a plain msgspec Struct so that it pickles to Spark workers, round-trips through
JSON into the report, and can be overridden field by field from the command line or a sweep.
"""

from __future__ import annotations

import math
import random
import re
from typing import Any, Final, Literal

import msgspec

from diskless.metrics import STORAGE_RATES
from diskless.wal import WalConfig

KIB: Final = 1024
MIB: Final = 1024 * KIB
GIB: Final = 1024 * MIB
MB: Final = 1_000_000
GB: Final = 1_000_000_000

KEY_BYTES: Final = 16
"""Every record's key is (producer id, producer sequence) as two big-endian int64s."""
RECORD_BYTES_MAX: Final = 256 * KIB
BATCH_BYTES_MAX: Final = 900 * KIB
"""Batches stay below the default max.message.bytes (1 MiB) with room for record overhead."""
REQUEST_ID_STRIDE: Final = 1 << 32
"""request_id = producer_index * stride + request_index: unique and sortable per producer."""
PRODUCER_ID_BASE: Final = 10**12
"""Idempotent producers number themselves from here, far above the ids the coordinator hands
out to transactional producers (blocks of 1000 from 0), so the two can never collide."""

_SIZE_PATTERN: Final = re.compile(r"(?i)^\s*([0-9]*\.?[0-9]+)\s*(b|kib|kb|mib|mb|gib|gb)?\s*$")
_SIZE_UNITS: Final = {
    None: 1,
    "b": 1,
    "kib": KIB,
    "kb": 1000,
    "mib": MIB,
    "mb": MB,
    "gib": GIB,
    "gb": GB,
}


def parse_size(text: str) -> int:
    """'8MiB' -> 8388608, '500kB' -> 500000, '4096' -> 4096."""
    match = _SIZE_PATTERN.match(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (e.g. 4096, 64KiB, 8MiB, 1GB)")
    unit = match.group(2).lower() if match.group(2) else None
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


class Distribution(msgspec.Struct, frozen=True):
    """A distribution of positive integers, written 'fixed:N', 'uniform:LO:HI' or
    'lognormal:MEDIAN:SIGMA' (sizes accept units: 'uniform:512:2KiB')."""

    kind: Literal["fixed", "uniform", "lognormal"]
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Distribution:
        parts = text.split(":")
        kind = parts[0]
        try:
            if kind == "fixed" and len(parts) == 2:
                return cls("fixed", parse_size(parts[1]))
            if kind == "uniform" and len(parts) == 3:
                lo, hi = parse_size(parts[1]), parse_size(parts[2])
                if not 1 <= lo <= hi:
                    raise ValueError("need 1 <= LO <= HI")
                return cls("uniform", lo, hi)
            if kind == "lognormal" and len(parts) == 3:
                median, sigma = parse_size(parts[1]), float(parts[2])
                if median < 1 or sigma < 0:
                    raise ValueError("need MEDIAN >= 1 and SIGMA >= 0")
                return cls("lognormal", median, sigma)
        except ValueError as exc:
            raise ValueError(f"bad distribution {text!r}: {exc}") from None
        raise ValueError(
            f"bad distribution {text!r}: use fixed:N, uniform:LO:HI or lognormal:MEDIAN:SIGMA"
        )

    def __str__(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{int(self.a)}"
        if self.kind == "uniform":
            return f"uniform:{int(self.a)}:{int(self.b)}"
        return f"lognormal:{int(self.a)}:{self.b:g}"

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        return max(1, round(self.a * math.exp(rng.gauss(0.0, self.b))))

    def mean(self) -> float:
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        return self.a * math.exp(self.b * self.b / 2)


class WorkloadSpec(msgspec.Struct, frozen=True, kw_only=True):
    """The generated load: who produces what, where, how fast. Same spec and seed, same requests.

    Sizes: `record_bytes` is a whole record's key + value (the key is 16 bytes); `batch_records`
    is records per batch. Each send round of a producer draws `partitions_per_round` distinct
    partitions by Zipf(`key_skew`) over a seeded ranking of all partitions (0 = uniform), and
    sends one produce request per destination broker (the round's partitions that share the
    producer's rack representative), as Kafka's sender drains ready batches per node.
    `rate_mb_s` 0 means closed loop (each producer keeps `max_in_flight` requests outstanding);
    otherwise requests are scheduled at that total rate. The run stops at `total_mb` produced or
    after `duration_s`, whichever comes first.
    """

    seed: int = 1
    brokers: int = 3
    racks: int = 3
    tasks: int = 2
    topics: int = 1
    partitions: int = 24
    """Partitions per topic."""
    producers: int = 24
    transactional_share: float = 0.25
    """Share of producers that are transactional (Kafka transaction version 2)."""
    txn_requests: int = 8
    """Produce requests per transaction of a transactional producer."""
    txn_abort_share: float = 0.2
    """Share of transactions a transactional producer aborts instead of committing (seeded)."""
    record_bytes: str = "lognormal:2KiB:0.5"
    batch_records: str = "uniform:8:56"
    partitions_per_round: int = 6
    key_skew: float = 0.8
    max_in_flight: int = 5
    rate_mb_s: float = 0.0
    total_mb: float = 1500.0
    duration_s: float = 60.0
    acks: int = -1
    timeout_ms: int = 30_000
    consumer_groups: int = 1
    """Consumer groups reading every partition while the producers run (fan-out; 0: no consume
    phase). Each group has one member per task, in a reader process beside that task."""
    consume_idle_s: float = 2.0
    """The consume phase's two idle windows once every consumer caught up: consumers attached,
    then detached (the baseline); their difference is the CPU an idle consumer costs."""
    fetch_wait_ms: int = 500
    """A consumer's fetch.max.wait.ms: how long an empty fetch is held before it is answered."""

    def validate(self) -> None:
        """ValueError naming the first bad field."""
        positive = ("brokers", "racks", "tasks", "topics", "partitions", "producers")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.brokers < self.racks:
            raise ValueError("every rack needs a broker: brokers must be >= racks")
        if not 0.0 <= self.transactional_share <= 1.0:
            raise ValueError("transactional_share must be in [0, 1]")
        if not 0.0 <= self.txn_abort_share <= 1.0:
            raise ValueError("txn_abort_share must be in [0, 1]")
        if self.txn_requests < 1:
            raise ValueError("txn_requests must be at least 1")
        if not 1 <= self.partitions_per_round <= self.topics * self.partitions:
            raise ValueError("partitions_per_round must be in [1, total partitions]")
        if self.key_skew < 0:
            raise ValueError("key_skew must be >= 0")
        if self.max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        if self.rate_mb_s < 0 or self.total_mb <= 0 or self.duration_s <= 0:
            raise ValueError("rate_mb_s must be >= 0, total_mb and duration_s > 0")
        if self.acks not in (-1, 1):
            raise ValueError("acks must be -1 or 1 (acks=0 has no result to measure)")
        if self.consumer_groups < 0 or self.consume_idle_s <= 0:
            raise ValueError("consumer_groups must be >= 0 and consume_idle_s > 0")
        if self.fetch_wait_ms < 0:
            raise ValueError("fetch_wait_ms must be >= 0")
        if self.consumer_groups and self.consume_idle_s * 1000 < 2 * self.fetch_wait_ms:
            raise ValueError(  # a window must see idle fetches answered, not one held through
                "consume_idle_s must be at least twice fetch_wait_ms"
            )
        record = Distribution.parse(self.record_bytes)
        if record.kind != "lognormal" and record.a < KEY_BYTES:
            raise ValueError(f"record_bytes must be at least the {KEY_BYTES}-byte key")
        Distribution.parse(self.batch_records)

    @property
    def effective_tasks(self) -> int:
        """Racks are never split across tasks (a broker lives in one task): at most `racks`."""
        return min(self.tasks, self.racks)


class StoreSpec(msgspec.Struct, frozen=True, kw_only=True):
    """Where objects go: a local directory (default) or an S3 bucket."""

    kind: Literal["local", "s3"] = "local"
    root: str = ""
    """Local store directory."""
    durable: bool = True
    """Local store: fsync every object (what a real disk-backed store would pay)."""
    endpoint_url: str | None = None
    bucket: str = ""
    prefix: str = ""
    region: str | None = None


class RunSpec(msgspec.Struct, frozen=True, kw_only=True):
    """The environment of one run: store, coordinator, broker/WAL settings."""

    store: StoreSpec
    coordinator: str
    """The run's batch coordinator as a resolved URL (`benchmarks.harness.coordinators`): a
    SQLite file shared by every task, or 'memory:' (in-memory, single task only)."""
    wal: dict[str, int] = msgspec.field(default_factory=dict)
    """Overrides of diskless.wal.WalConfig fields (e.g. commit_interval_ms, buffer_max_bytes)."""
    run_dir: str = ""


class CostRates(msgspec.Struct, frozen=True, kw_only=True):
    """Cloud list prices the cost model uses (defaults: AWS S3 Standard, us-east-1)."""

    put_per_1000: float = STORAGE_RATES.put_per_1000
    get_per_1000: float = STORAGE_RATES.get_per_1000
    storage_gb_month: float = STORAGE_RATES.storage_gb_month
    """Object storage $/GB-month (S3 Standard, first 50 TB): the library's defaults, which the
    brokers' cost metrics use too (`diskless.metrics.StorageRates`)."""
    block_storage_gb_month: float = 0.08
    """Classic Kafka's broker disks, $/GB-month (EBS gp3), paid for each of the RF replicas."""
    block_storage_utilization: float = 1.0
    """The share of classic brokers' disks that holds data (1.0: none kept free, the cheapest
    classic case; operators often keep half free)."""
    retention_hours: float = 24.0
    """How long produced bytes are stored, on both sides."""
    cross_az_per_gb: float = 0.02
    """Cross-AZ transfer, both directions together ($0.01 out + $0.01 in on AWS)."""
    replication_factor: int = 3
    azs: int = 3


def apply_overrides(
    workload: WorkloadSpec, wal: dict[str, int], overrides: dict[str, str]
) -> tuple[WorkloadSpec, dict[str, int]]:
    """Set `name=value` overrides: WorkloadSpec fields by name, anything else on the WAL config.

    Values are converted to the field's type; WAL values accept size units ('8MiB'), and the
    resulting WAL configuration is checked by WalConfig itself.
    """
    fields: dict[str, Any] = {}
    new_wal = dict(wal)
    names = set(WorkloadSpec.__struct_fields__)
    for name, text in overrides.items():
        if name in names:
            current = getattr(workload, name)
            if isinstance(current, bool):
                fields[name] = text.lower() in ("1", "true", "yes")
            elif isinstance(current, int):
                fields[name] = int(text)
            elif isinstance(current, float):
                fields[name] = float(text)
            else:
                fields[name] = text
        elif name in WalConfig.__struct_fields__:
            new_wal[name] = parse_size(text)
        else:
            raise ValueError(f"{name!r} is neither a workload field nor a WalConfig field")
    result = msgspec.structs.replace(workload, **fields)
    result.validate()
    msgspec.convert(new_wal, WalConfig)  # ValueError from WalConfig's own checks
    return result, new_wal
