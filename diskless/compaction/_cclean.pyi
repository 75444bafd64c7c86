"""The cleaner's per-record work (C extension; `_cclean.c` holds the rules)."""

def map_keys(
    section: bytes | bytearray | memoryview,
    count: int,
    base_offset: int,
    start: int,
    end: int,
    table: bytearray,
    slots: int,
    entries: int,
    entries_max: int,
    /,
) -> tuple[int, int, int]:
    """(entries, records mapped, the offset of the first key that did not fit or -1)."""

def filter_records(
    section: bytes | bytearray | memoryview,
    count: int,
    base_offset: int,
    latest: int,
    table: bytearray,
    slots: int,
    tombstones_stay: bool,
    /,
) -> tuple[bytes, bool, bool, int]:
    """(spans of the kept records, all kept, a tombstone kept, largest timestamp delta kept)."""

def assemble(section: bytes | bytearray | memoryview, spans: bytes, shift: int, /) -> bytes:
    """The kept records, each timestamp delta plus `shift`."""

def md5(data: bytes | bytearray | memoryview, /) -> bytes: ...
