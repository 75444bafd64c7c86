"""Preconditions shared by every backend: of a commit (broker fencing, object-key reuse), and of
a new topic (its name and partition count). Fencing and key conflicts are protocol outcomes,
returned as reasons, not raised."""

from __future__ import annotations

import re
from typing import Final

from diskless.coordinator._values import FileState


def broker_fenced(broker_id: int, broker_epoch: int, latest_epoch: int | None) -> str | None:
    """Why the broker incarnation is fenced, None if it is current: only the latest epoch
    handed out to a broker may write; older and unknown ones are fenced."""
    if latest_epoch is None:
        return f"broker {broker_id} was never registered"
    if broker_epoch != latest_epoch:
        return f"broker {broker_id} epoch {broker_epoch} is not the current epoch {latest_epoch}"
    return None


def object_key_taken(object_key: str, state: FileState | None) -> str | None:
    """Why `object_key` cannot be committed, None if it can: a key is committed once, and
    never after it was condemned as an orphan."""
    if state is not None:
        return f"object {object_key!r} is already {state.value}"
    return None


TOPIC_NAME_LENGTH_MAX: Final = 249
_TOPIC_NAME: Final = re.compile(r"[a-zA-Z0-9._-]+")


def check_topic_name(name: str) -> None:
    """Kafka's topic name rule (`Topic.validate`): 1-249 of `[a-zA-Z0-9._-]`, not `.` or `..`.

    Names reach object keys, file names and log lines, so anything else is refused here, below
    every backend, rather than by each caller.
    """
    if not name:
        raise ValueError("a topic needs a name")
    if name in (".", ".."):
        raise ValueError(f"illegal topic name {name!r}: '.' and '..' are reserved")
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        raise ValueError(
            f"illegal topic name of {len(name)} characters: at most {TOPIC_NAME_LENGTH_MAX}"
        )
    if not _TOPIC_NAME.fullmatch(name):
        raise ValueError(
            f"illegal topic name {name!r}: only ASCII letters, digits, '.', '_' and '-' are legal"
        )


def check_new_topic(name: str, partitions: int) -> None:
    check_topic_name(name)
    if partitions < 1:
        raise ValueError(f"a topic needs at least one partition, not {partitions}")
