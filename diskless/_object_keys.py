"""Object names: a zero-padded creation time first, so that key order is time order.

Three parts rely on the names and sit above this module: the WAL names its objects here, the
coordinator refuses to commit an object older than its commit-age bound (`commit_too_late`), and
the file manager lists only what it has not reconciled yet (`start_after` a key of a given age)
instead of the whole prefix, trusting that bound to condemn orphans.

A write probe (`probe_key`: a broker process checking that the store takes writes, where the
WAL's objects go) is named here too, unlike any WAL key, so that the file manager skips it
rather than condemn it as an orphan: one key per broker id, written and deleted by the same
process, so that one left by a crash is overwritten and deleted by its next probe.
"""

from __future__ import annotations

import re
import secrets
from typing import Final

DEFAULT_OBJECT_PREFIX: Final = "wal/"
_TIME_DIGITS: Final = 13
_KEY_PATTERN: Final = re.compile(r"(\d{13})-b(\d+)-([0-9a-f]+)\.wal")
_PROBE_PATTERN: Final = re.compile(r"write-probe-b\d+")


def new_object_key(prefix: str, created_ms: int, broker_id: int, suffix: str | None = None) -> str:
    """A fresh, unique key `{prefix}{created_ms:013d}-b{broker_id}-{suffix}.wal`."""
    assert 0 <= created_ms < 10**_TIME_DIGITS, created_ms
    tail = suffix if suffix is not None else secrets.token_hex(8)
    return f"{prefix}{created_ms:0{_TIME_DIGITS}d}-b{broker_id}-{tail}.wal"


def probe_key(prefix: str, broker_id: int) -> str:
    """The key of broker `broker_id`'s write probe, under the WAL's `prefix`."""
    return f"{prefix}write-probe-b{broker_id}"


def is_probe_key(key: str, prefix: str) -> bool:
    """Whether `key` is a write probe's (`probe_key`), not an object of the WAL's."""
    return key.startswith(prefix) and _PROBE_PATTERN.fullmatch(key, len(prefix)) is not None


def object_key_time_ms(key: str, prefix: str) -> int | None:
    """The creation time encoded in a WAL key, or None for a key this library did not make."""
    if not key.startswith(prefix):
        return None
    match = _KEY_PATTERN.fullmatch(key, len(prefix))
    return int(match.group(1)) if match else None


def object_key_floor(prefix: str, created_ms: int) -> str:
    """A key that sorts before every key created at or after `created_ms` (for `start_after`)."""
    return f"{prefix}{max(0, created_ms):0{_TIME_DIGITS}d}"


def commit_too_late(
    object_key: str, prefix: str, now_ms: int, commit_age_max_ms: int | None
) -> str | None:
    """Why a commit of `object_key` now is too late, None if it is not.

    A commit may not name an object created more than `commit_age_max_ms` ago: this bounds how
    late a commit can land, which the file manager's orphan grace relies on
    (`orphan_grace_ms > commit_age_max_ms + clock skew`). Keys without an encoded creation time
    (not named by `new_object_key`) are exempt.
    """
    if commit_age_max_ms is None:
        return None
    created_ms = object_key_time_ms(object_key, prefix)
    if created_ms is not None and created_ms < now_ms - commit_age_max_ms:
        return (
            f"object {object_key!r} was created {now_ms - created_ms} ms ago, more than "
            f"commit_age_max_ms ({commit_age_max_ms}); the file manager may reclaim it"
        )
    return None
