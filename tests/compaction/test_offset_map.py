"""Unit and property: the cleaner's key→offset map answers as a dict would, within its bytes.

Against a dict of the same puts: every key it accepted maps to its greatest offset, a key never
put is absent, and once it holds `entries_max` keys it refuses new ones (changing nothing) while
still updating the keys it holds. Its buffer never exceeds its configured size.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diskless.compaction import MAP_BYTES_MAX, MAP_BYTES_MIN, OffsetMap, key_hash

PROPERTY = settings(
    max_examples=200,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)


@PROPERTY
@given(
    keys=st.lists(st.binary(max_size=12), min_size=1, max_size=400),
    map_bytes=st.integers(MAP_BYTES_MIN, 40 * MAP_BYTES_MIN),
    load_factor=st.sampled_from([0.5, 0.9, 1.0]),
)
def test_the_map_answers_as_a_dict_of_what_it_accepted(
    keys: list[bytes], map_bytes: int, load_factor: float
) -> None:
    offset_map = OffsetMap(map_bytes, load_factor)
    model: dict[bytes, int] = {}
    for offset, key in enumerate(keys):
        accepted = offset_map.put(key_hash(key), offset)
        if key in model or len(model) < offset_map.entries_max:
            assert accepted
            model[key] = offset
        else:
            assert not accepted
        assert len(offset_map) == len(model) <= offset_map.entries_max
    for key in set(keys) | {b"never-put"}:
        assert offset_map.get(key_hash(key)) == model.get(key, -1)
    assert offset_map.entries_max == max(1, int(offset_map.slots * load_factor))
    assert offset_map.slots * 24 <= map_bytes


def test_clearing_forgets_every_key_and_the_latest_offset() -> None:
    offset_map = OffsetMap(MAP_BYTES_MIN)
    assert offset_map.put(key_hash(b"k"), 7)
    offset_map.set_latest_offset(7)
    offset_map.clear()
    assert offset_map.get(key_hash(b"k")) == -1
    assert len(offset_map) == 0
    assert offset_map.latest_offset == -1


@pytest.mark.parametrize(
    ("size", "load_factor"), [(MAP_BYTES_MIN - 1, 0.9), (MAP_BYTES_MAX + 1, 0.9), (4096, 0.0)]
)
def test_a_map_outside_its_limits_is_refused(size: int, load_factor: float) -> None:
    with pytest.raises(ValueError):
        OffsetMap(size, load_factor)
