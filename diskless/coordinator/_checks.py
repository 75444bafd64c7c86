"""Preconditions of a commit that reject it whole: broker fencing and object-key reuse."""

from __future__ import annotations

from diskless.coordinator._api import FileState
from diskless.errors import BrokerFencedError, ObjectKeyConflictError


def check_broker_epoch(broker_id: int, broker_epoch: int, latest_epoch: int | None) -> None:
    """Only the latest epoch handed out to a broker may commit; older and unknown ones fail."""
    if latest_epoch is None:
        raise BrokerFencedError(f"broker {broker_id} was never registered")
    if broker_epoch != latest_epoch:
        raise BrokerFencedError(
            f"broker {broker_id} epoch {broker_epoch} is not the current epoch {latest_epoch}"
        )


def check_object_key(object_key: str, state: FileState | None) -> None:
    """A key may be committed once, and never after it was condemned as an orphan."""
    if state is not None:
        raise ObjectKeyConflictError(f"object {object_key!r} is already {state.value}")


def check_new_topic(name: str, partitions: int) -> None:
    if not name:
        raise ValueError("a topic needs a name")
    if partitions < 1:
        raise ValueError(f"a topic needs at least one partition, not {partitions}")
