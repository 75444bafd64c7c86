"""Conversions from stored producer state to the contract's inspection values."""

from __future__ import annotations

from diskless.coordinator._values import ProducerSnapshot
from diskless.txn import ProducerEntry


def producer_snapshot(entry: ProducerEntry) -> ProducerSnapshot:
    return ProducerSnapshot(
        producer_id=entry.producer_id,
        producer_epoch=entry.producer_epoch,
        last_sequence=entry.last_sequence,
        last_timestamp=entry.last_timestamp,
        coordinator_epoch=entry.coordinator_epoch,
        current_txn_first_offset=entry.current_txn_first_offset,
        retained_batches=[
            (b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches
        ],
    )
