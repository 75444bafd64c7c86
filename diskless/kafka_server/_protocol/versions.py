"""The API versions this server advertises, and why each range stops where it does.

Every version listed must be modelled by kio (it decodes the request and encodes the response)
and handled by `_handlers`; a test checks both. The ranges cover what the three client libraries
of the acceptance tests negotiate (each picks the highest version both sides support):
librdkafka 2.x, kafka-python 3.x and aiokafka 0.14 (which tops out at Produce v8, Fetch v11,
Metadata v5).

Upper bounds that are deliberate:
- Produce v11 / Fetch v12: v13 of both address topics by topic id (KIP-516); this server
  addresses them by name. Produce v12 is the transaction-version-2 marker (KIP-890 part 2:
  the broker enrolls partitions itself), which the clients here do not use.
- AddPartitionsToTxn v3 / AddOffsetsToTxn v3 / TxnOffsetCommit v3 / EndTxn v3 /
  InitProducerId v4: the client-side transaction protocol (transaction version 1, see `_txn`).
  v4+ of AddPartitionsToTxn is broker-to-broker; v4 of AddOffsetsToTxn, TxnOffsetCommit and
  EndTxn only add TRANSACTION_ABORTABLE (KIP-890), which this server does not send.
- FindCoordinator v4: batched keys; v5/v6 only add error codes and share groups.
- ListOffsets v7 (MAX_TIMESTAMP); v8+ add tiered-storage and remote offsets specs.
- OffsetFetch v7: v8 batches several groups in one request.
- DeleteTopics v5: v6 may name topics by topic id only (KIP-516).
- CreateTopics v7, CreatePartitions v3, DescribeConfigs v4, DeleteRecords v2: kio's newest.
  The clients pick what they know below that (librdkafka 2.x: CreateTopics v4, DescribeConfigs
  v1, DeleteRecords v1).
Lower bounds are kio's oldest models (Produce v3 is also the first with transactional ids and
record batch v2, which is all the library stores; CreateTopics v2, DeleteTopics v1 and
DescribeConfigs v1 are below what any client of the acceptance tests sends).
"""

from __future__ import annotations

import enum
from typing import Final


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    API_VERSIONS = 18
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    CREATE_PARTITIONS = 37


SUPPORTED_VERSIONS: Final[dict[ApiKey, tuple[int, int]]] = {
    ApiKey.PRODUCE: (3, 11),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (0, 12),
    ApiKey.OFFSET_COMMIT: (2, 8),
    ApiKey.OFFSET_FETCH: (1, 7),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.JOIN_GROUP: (0, 7),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 4),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 3),
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 5),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.CREATE_PARTITIONS: (0, 3),
}
"""(min, max) inclusive per API key, as advertised in ApiVersions."""

API_VERSIONS_FALLBACK: Final = 0
"""Kafka answers an ApiVersions request of an unsupported version with a v0 response carrying
UNSUPPORTED_VERSION and the supported ranges, so the client can retry with a version it finds."""


def supported(api_key: int, api_version: int) -> bool:
    try:
        low, high = SUPPORTED_VERSIONS[ApiKey(api_key)]
    except ValueError:
        return False
    return low <= api_version <= high
