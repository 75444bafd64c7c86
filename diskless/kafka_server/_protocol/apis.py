"""The APIs this server knows, and an API as its union of request classes declares it.

Each advertised API is declared once, as the union of kio request classes of its versions
(`messages`, `messages_admin`): the union names the API key (every kio class carries it), the
version range (the classes' versions, which must be contiguous) and, through kio's index, the
response class of each version. `Api` reads all of that from the union, so a range is never
written a second time. Why each range stops where it does is said beside the union.
"""

from __future__ import annotations

import enum
import types
import typing
from typing import Final

from kio.static.protocol import RequestPayload, ResponsePayload

from diskless.kafka_server._protocol.codec import request_schema, response_schema


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
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


API_VERSIONS_FALLBACK: Final = 0
"""Kafka answers an ApiVersions request of an unsupported version with a v0 response carrying
UNSUPPORTED_VERSION and the supported ranges, so the client can retry with a version it finds."""


class Api:
    """One API, from the union of its request classes: key, versions, response classes."""

    __slots__ = ("_requests", "_responses", "key", "versions")

    def __init__(self, requests: object) -> None:
        """`requests`: a union of kio request classes (or one class), one per version."""
        union = isinstance(requests, types.UnionType)
        classes = typing.get_args(requests) if union else (requests,)
        keys = {getattr(c, "__api_key__", None) for c in classes}
        key = keys.pop() if len(keys) == 1 else None
        if key is None:
            raise TypeError(f"{requests} is not a union of one API's request classes")
        self.key = ApiKey(int(key))
        versions = sorted(int(c.__version__) for c in classes)
        if versions != list(range(versions[0], versions[-1] + 1)):
            raise TypeError(f"{self.key.name}: versions {versions} are not one range")
        for version in versions:
            if request_schema(self.key, version) not in classes:
                raise TypeError(f"{self.key.name} v{version}: not kio's request class")
        self.versions = (versions[0], versions[-1])
        """(min, max) inclusive, as advertised in ApiVersions."""
        self._requests = classes
        self._responses = {v: response_schema(self.key, v) for v in versions}

    def serves(self, version: int) -> bool:
        return version in self._responses

    def response_schema(self, version: int) -> type[ResponsePayload]:
        """The response class of an advertised `version`."""
        return self._responses[version]

    def is_request(self, request: RequestPayload) -> bool:
        """Whether `request` is of one of the union's classes."""
        return isinstance(request, self._requests)
