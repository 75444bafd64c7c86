"""Key and range checks shared by every backend, so a key valid in one store is valid in all."""

from __future__ import annotations

from diskless.errors import InvalidRangeError

KEY_BYTES_MAX = 1024  # S3's limit on a key's UTF-8 length; enforced everywhere for portability


def validate_key(key: str) -> None:
    """Reject keys that are not portable '/'-separated relative names.

    Empty segments, '.' and '..' would alias other keys (or escape the root) on a filesystem,
    and NUL cannot appear in a path, so no backend accepts them.
    """
    if not key:
        raise ValueError("object key is empty")
    if "\x00" in key:
        raise ValueError(f"object key contains NUL: {key!r}")
    if len(key.encode("utf-8", errors="surrogatepass")) > KEY_BYTES_MAX:
        raise ValueError(f"object key longer than {KEY_BYTES_MAX} bytes")
    if key.startswith("/") or "\\" in key:
        raise ValueError(f"object key must be relative and '/'-separated: {key!r}")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise ValueError(f"object key has an empty, '.' or '..' segment: {key!r}")


def validate_prefix(prefix: str) -> None:
    """A listing prefix is a key, possibly ending in '/', or empty."""
    if prefix:
        validate_key(prefix[:-1] if prefix.endswith("/") else prefix)


def check_range(key: str, start: int, end: int) -> None:
    """Checks a ranged read can do before it knows the object's size."""
    if start < 0 or end <= start:
        raise InvalidRangeError(f"invalid range [{start}, {end}) for {key!r}")


def check_range_within(key: str, start: int, end: int, size: int) -> None:
    """Checks once the object's size is known; keeps every backend's error message the same."""
    check_range(key, start, end)
    if end > size:
        raise InvalidRangeError(f"range [{start}, {end}) beyond the end of {key!r} ({size} bytes)")


def check_list_limit(limit: int, limit_max: int) -> None:
    """A page size every backend can honour (S3 caps pages at 1000 keys)."""
    if not 1 <= limit <= limit_max:
        raise ValueError(f"list limit must be in [1, {limit_max}], got {limit}")


def listing_floor(token: str | None, start_after: str | None) -> str | None:
    """The key a listing resumes after, for stores whose token is simply the last key returned."""
    if token is None:
        return start_after
    if start_after is None:
        return token
    return max(token, start_after)
