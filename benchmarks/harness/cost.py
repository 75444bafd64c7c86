"""The cost model: what producing one GB costs with diskless topics and with classic Kafka.

Diskless, per GB produced (GB = 10^9 bytes of acknowledged record batches); "write" is PUTs plus
storage, "with one read" adds the GETs:
    PUT $   = PUT requests per GB  x put_per_1000 / 1000    (measured: every billed PUT-class
                                                             request of the produce phase)
    GET $   = GET requests per GB  x get_per_1000 / 1000    (measured: one consumer reading every
                                                             partition once, cold cache)
    storage = stored GB per GB x storage_gb_month x retention_hours / 730   (S3 Standard)
    cross-AZ = 0: producers send to their own rack's representative broker, and object storage
               replicates across AZs at no transfer charge.
Classic Kafka, per GB produced, replication factor RF over A availability zones (rack-aware
placement, leaders spread evenly over AZs, consumers fetching from a same-AZ follower):
    replication copies crossing an AZ = RF - ceil(RF / A)      (RF 3, A 3: 2)
    producer traffic crossing an AZ   = (A - 1) / A            (A 3: 2/3 of the time)
    cross-AZ $ = (copies + producer share) x cross_az_per_gb   (defaults: 2.667 GB x $0.02)
    storage $  = RF x block_storage_gb_month / block_storage_utilization x retention_hours / 730
                 (defaults: 3 x $0.08 gp3, disks full)
Left out on both sides: compute, request charges of the coordinator database, and consumer
traffic (assumed AZ-local on both).
"""

from __future__ import annotations

import math
from typing import Final

import msgspec

from benchmarks.harness.spec import GB, CostRates

HOURS_PER_MONTH: Final = 730.0


class CostInputs(msgspec.Struct, frozen=True, kw_only=True):
    produced_bytes: int
    put_requests: int
    get_requests: int
    objects: int
    stored_bytes: int


class CostModel(msgspec.Struct, frozen=True, kw_only=True):
    produced_gb: float
    objects_per_gb: float
    puts_per_gb: float
    gets_per_gb: float
    stored_gb_per_gb: float
    diskless_put_usd_per_gb: float
    diskless_get_usd_per_gb: float
    diskless_storage_usd_per_gb: float
    diskless_write_usd_per_gb: float
    """The produce path alone: PUTs and storage, what classic Kafka's replication is set against."""
    diskless_usd_per_gb: float
    """Writes plus one cold full read (GETs)."""
    classic_cross_az_gb_per_gb: float
    classic_cross_az_usd_per_gb: float
    classic_storage_usd_per_gb: float
    classic_usd_per_gb: float
    """Cross-AZ replication plus RF copies on block storage."""
    classic_over_diskless_write: float
    """How many times more classic Kafka pays than diskless writes (inf when those are free)."""
    classic_over_diskless: float
    """How many times more classic Kafka pays than diskless writes plus one read."""


def classic_cross_az_gb_per_gb(rates: CostRates) -> float:
    """Cross-AZ GB moved per GB produced by classic Kafka (see the module docstring)."""
    if rates.replication_factor < 1 or rates.azs < 1:
        raise ValueError("replication_factor and azs must be at least 1")
    copies = rates.replication_factor - math.ceil(rates.replication_factor / rates.azs)
    producer_share = (rates.azs - 1) / rates.azs
    return copies + producer_share


def cost_model(inputs: CostInputs, rates: CostRates) -> CostModel:
    if inputs.produced_bytes <= 0:
        raise ValueError("no bytes produced: nothing to price")
    gb = inputs.produced_bytes / GB
    puts_per_gb = inputs.put_requests / gb
    gets_per_gb = inputs.get_requests / gb
    stored_gb_per_gb = inputs.stored_bytes / inputs.produced_bytes
    put_usd = puts_per_gb * rates.put_per_1000 / 1000.0
    get_usd = gets_per_gb * rates.get_per_1000 / 1000.0
    storage_usd = (
        stored_gb_per_gb * rates.storage_gb_month * rates.retention_hours / HOURS_PER_MONTH
    )
    write = put_usd + storage_usd
    diskless = write + get_usd
    cross_az = classic_cross_az_gb_per_gb(rates)
    if not 0 < rates.block_storage_utilization <= 1:
        raise ValueError("block_storage_utilization must be in (0, 1]")
    classic_storage = (
        rates.replication_factor
        * rates.block_storage_gb_month
        / rates.block_storage_utilization
        * rates.retention_hours
        / HOURS_PER_MONTH
    )
    classic = cross_az * rates.cross_az_per_gb + classic_storage
    return CostModel(
        produced_gb=gb,
        objects_per_gb=inputs.objects / gb,
        puts_per_gb=puts_per_gb,
        gets_per_gb=gets_per_gb,
        stored_gb_per_gb=stored_gb_per_gb,
        diskless_put_usd_per_gb=put_usd,
        diskless_get_usd_per_gb=get_usd,
        diskless_storage_usd_per_gb=storage_usd,
        diskless_write_usd_per_gb=write,
        diskless_usd_per_gb=diskless,
        classic_cross_az_gb_per_gb=cross_az,
        classic_cross_az_usd_per_gb=cross_az * rates.cross_az_per_gb,
        classic_storage_usd_per_gb=classic_storage,
        classic_usd_per_gb=classic,
        classic_over_diskless_write=classic / write if write > 0 else math.inf,
        classic_over_diskless=classic / diskless if diskless > 0 else math.inf,
    )


ASSUMPTIONS: Final = [
    "GB = 10^9 bytes of acknowledged record batches (Kafka wire format, uncompressed).",
    "Diskless PUTs: every billed PUT-class request of the produce phase, as counted by the "
    "object store client (a multipart upload counts create + parts + complete).",
    "Diskless GETs: one consumer reading every partition once from object storage, cold cache "
    "(the verification read-back: every partition in each fetch, Kafka's default fetch sizes); "
    "their count is the read path's ranged GETs, so it depends on how it coalesces ranges. "
    "When the run consolidated its data, the read-back of the consolidated objects counts: "
    "data older than the consolidation age is read from there.",
    "Diskless cross-AZ: none; producers send to their rack's representative broker and object "
    "storage replicates across AZs without transfer charges.",
    "Classic Kafka cross-AZ GB per GB = (RF - ceil(RF/AZs)) replica copies + (AZs-1)/AZs of "
    "producer traffic reaching a leader in another AZ; consumers fetch from a same-AZ replica.",
    "Storage for the retention time on both sides: diskless stores the produced objects once "
    "in object storage (which replicates them across AZs itself); classic Kafka stores RF "
    "copies on block storage, priced per provisioned GB (disks as full as "
    "block_storage_utilization says).",
    "Left out on both sides: compute, coordinator database, consumer traffic.",
]
