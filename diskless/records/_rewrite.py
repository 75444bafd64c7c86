"""Rewriting a batch's producer epoch and base sequence: the transaction-version bridge.

A front end that speaks transaction version 1 to its clients over a version 2 coordinator
(KIP-890) must present each transactional batch at the coordinator's epoch, with sequences that
restart at 0 per epoch. Both fields are inside the CRC, so the CRC is recomputed; the rewrite works
on a copy, since the client's bytes may still be referenced by the request that carried them.
"""

from __future__ import annotations

import struct
from typing import Final

import crc32c

from diskless.records._header import SEQUENCE_MAX, BatchHeader

_CRC_AT: Final = 17
_CRC_FROM: Final = 21
"""The CRC covers everything from the attributes to the end of the batch."""
_PRODUCER_EPOCH_AT: Final = 51
_BASE_SEQUENCE_AT: Final = 53
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_UINT32: Final = struct.Struct(">I")


def rewrite_producer_state(batch: BatchHeader, *, producer_epoch: int, base_sequence: int) -> bytes:
    """A copy of `batch` at `producer_epoch` starting at `base_sequence`, its CRC recomputed.

    Only a batch whose CRC was valid should be rewritten: the new CRC would otherwise hide the
    corruption from the validation that follows.
    """
    if not -(2**15) <= producer_epoch < 2**15:
        raise ValueError(f"producer epoch {producer_epoch} is not an int16")
    if not -1 <= base_sequence <= SEQUENCE_MAX:
        raise ValueError(f"base sequence {base_sequence} outside [-1, {SEQUENCE_MAX}]")
    copy = bytearray(batch.bytes_view())
    _INT16.pack_into(copy, _PRODUCER_EPOCH_AT, producer_epoch)
    _INT32.pack_into(copy, _BASE_SEQUENCE_AT, base_sequence)
    _UINT32.pack_into(copy, _CRC_AT, crc32c.crc32c(memoryview(copy)[_CRC_FROM:]))
    return bytes(copy)
