"""Unit tests of the cost model's arithmetic against hand-computed values."""

from __future__ import annotations

import math

import pytest

from benchmarks.harness.cost import CostInputs, classic_cross_az_gb_per_gb, cost_model
from benchmarks.harness.spec import CostRates


def test_classic_cross_az_with_rf3_over_three_azs_is_two_copies_plus_two_thirds() -> None:
    assert classic_cross_az_gb_per_gb(CostRates()) == pytest.approx(2 + 2 / 3)


@pytest.mark.parametrize(
    ("rf", "azs", "expected"),
    [(3, 2, 1 + 1 / 2), (1, 3, 0 + 2 / 3), (3, 1, 0.0), (6, 3, 4 + 2 / 3)],
)
def test_classic_cross_az_follows_the_stated_formula(rf: int, azs: int, expected: float) -> None:
    rates = CostRates(replication_factor=rf, azs=azs)
    assert classic_cross_az_gb_per_gb(rates) == pytest.approx(expected)


def test_default_rates_price_two_gb_by_hand() -> None:
    # 2 GB produced in 250 objects (250 PUTs), read back with 10,000 GETs, stored as 2.1 GB.
    inputs = CostInputs(
        produced_bytes=2_000_000_000,
        put_requests=250,
        get_requests=10_000,
        objects=250,
        stored_bytes=2_100_000_000,
    )
    model = cost_model(inputs, CostRates())
    assert model.produced_gb == pytest.approx(2.0)
    assert model.objects_per_gb == pytest.approx(125.0)
    assert model.puts_per_gb == pytest.approx(125.0)
    assert model.gets_per_gb == pytest.approx(5_000.0)
    assert model.stored_gb_per_gb == pytest.approx(1.05)
    assert model.diskless_put_usd_per_gb == pytest.approx(125 * 0.005 / 1000)  # $0.000625
    assert model.diskless_get_usd_per_gb == pytest.approx(5_000 * 0.0004 / 1000)  # $0.002
    # a day of S3 Standard for 1.05 GB: 1.05 x $0.023 x 24 / 730 = $0.000793973
    assert model.diskless_storage_usd_per_gb == pytest.approx(0.000793973, rel=1e-6)
    assert model.diskless_write_usd_per_gb == pytest.approx(0.000625 + 0.000793973, rel=1e-6)
    assert model.diskless_usd_per_gb == pytest.approx(0.002625 + 0.000793973, rel=1e-6)
    assert model.classic_cross_az_usd_per_gb == pytest.approx((2 + 2 / 3) * 0.02)  # $0.05333
    # three gp3 copies for a day: 3 x $0.08 x 24 / 730 = $0.00789041
    assert model.classic_storage_usd_per_gb == pytest.approx(0.00789041, rel=1e-6)
    assert model.classic_usd_per_gb == pytest.approx(0.0533333 + 0.00789041, rel=1e-5)
    assert model.classic_over_diskless_write == pytest.approx(
        (0.0533333 + 0.00789041) / (0.000625 + 0.000793973), rel=1e-5
    )
    assert model.classic_over_diskless == pytest.approx(
        (0.0533333 + 0.00789041) / (0.002625 + 0.000793973), rel=1e-5
    )


def test_storage_is_priced_per_hour_of_retention() -> None:
    inputs = CostInputs(
        produced_bytes=1_000_000_000,
        put_requests=0,
        get_requests=0,
        objects=0,
        stored_bytes=1_000_000_000,
    )
    rates = CostRates(storage_gb_month=0.023, retention_hours=73.0)
    model = cost_model(inputs, rates)
    assert model.diskless_storage_usd_per_gb == pytest.approx(0.023 * 73 / 730)  # $0.0023
    assert model.diskless_write_usd_per_gb == model.diskless_usd_per_gb == pytest.approx(0.0023)
    assert model.classic_storage_usd_per_gb == pytest.approx(3 * 0.08 * 73 / 730)  # $0.024


def test_classic_disks_kept_half_free_cost_twice_as_much() -> None:
    inputs = CostInputs(
        produced_bytes=1_000_000_000, put_requests=0, get_requests=0, objects=0, stored_bytes=0
    )
    full = cost_model(inputs, CostRates(retention_hours=730.0))
    half = cost_model(inputs, CostRates(retention_hours=730.0, block_storage_utilization=0.5))
    assert full.classic_storage_usd_per_gb == pytest.approx(0.24)  # a month of 3 x gp3
    assert half.classic_storage_usd_per_gb == pytest.approx(0.48)
    with pytest.raises(ValueError, match="utilization"):
        cost_model(inputs, CostRates(block_storage_utilization=0.0))


def test_free_diskless_is_infinitely_cheaper_and_nothing_produced_is_an_error() -> None:
    free = CostInputs(produced_bytes=10, put_requests=0, get_requests=0, objects=0, stored_bytes=0)
    assert math.isinf(cost_model(free, CostRates()).classic_over_diskless)
    assert math.isinf(cost_model(free, CostRates()).classic_over_diskless_write)
    unpriced = CostRates(storage_gb_month=0.0, block_storage_gb_month=0.0)
    priced_free = cost_model(
        CostInputs(produced_bytes=10, put_requests=0, get_requests=0, objects=0, stored_bytes=10),
        unpriced,
    )
    assert math.isinf(priced_free.classic_over_diskless_write)
    with pytest.raises(ValueError, match="nothing to price"):
        cost_model(
            CostInputs(produced_bytes=0, put_requests=1, get_requests=0, objects=1, stored_bytes=1),
            CostRates(),
        )
