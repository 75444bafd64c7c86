"""OffsetForLeaderEpoch: where a leader epoch's records end, which clients ask after a leader
change to check that their position is still in the log (KIP-320).

Every partition's leader epoch is the cluster's membership version (`ClusterView.generation`),
and there is one log per partition, which no replica ever truncates: epochs are not tied to log
positions, and every offset holds the same record under every epoch. So the truthful answer
for a requested epoch is Kafka's with a one-entry epoch history:
- the current epoch, or an older one: that epoch and the log end offset (the high watermark:
  a record is in the log once it is committed, and then visible). Kafka answers an older epoch
  with the start of the next one, the offset from which its log may differ; here none ever
  does, so the log of an older epoch reaches the log end too, and a client's position, which is
  never past the high watermark, stays valid;
- an epoch above the current one (a client that learned its epoch elsewhere, and names no
  `current_leader_epoch` that would be refused first): the current epoch, the largest at or
  below it, and the log end offset;
- no epoch (-1): UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET (-1, -1), as Kafka.

Errors, per partition, in Kafka's order: TOPIC_AUTHORIZATION_FAILED without DESCRIBE on the
topic (CLUSTER_ACTION on the cluster, a follower's right, allows every topic, as in Kafka's
`KafkaApis`); UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist; then the
`current_leader_epoch` check Fetch makes (`ClusterView.check_epoch`): FENCED_LEADER_EPOCH below
the cluster's epoch, UNKNOWN_LEADER_EPOCH above it.
"""

from __future__ import annotations

from typing import Final

from kio.static.protocol import ResponsePayload

from diskless._kafka_errors import list_offsets_error
from diskless._results import ListOffsetsResult
from diskless._types import ErrorCode, IsolationLevel, OffsetSpec, TopicPartition
from diskless.coordinator import AclOperation
from diskless.errors import DisklessError
from diskless.kafka_server._handlers._access import DESCRIBE, Access
from diskless.kafka_server._handlers._errors import failure_code
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response
from diskless.kafka_server._handlers.context import BrokerContext, Session
from diskless.kafka_server._protocol.fields import build, nested, wire
from diskless.kafka_server._protocol.messages import OffsetForLeaderEpochRequest

UNDEFINED_EPOCH: Final = -1
UNDEFINED_EPOCH_OFFSET: Final = -1


async def handle_offset_for_leader_epoch(
    context: BrokerContext,
    session: Session,
    request: OffsetForLeaderEpochRequest,
    response: Response,
) -> ResponsePayload:
    wanted = [
        TopicPartition(topic.topic, int(p.partition))
        for topic in request.topics
        for p in topic.partitions
    ]
    access = Access(context, session)
    refused = (
        set() if access.cluster(AclOperation.CLUSTER_ACTION) else access.refused(DESCRIBE, wanted)
    )
    ends = await _log_ends(context, [tp for tp in dict.fromkeys(wanted) if tp not in refused])
    topic_entry = nested(response, "OffsetForLeaderTopicResult")
    partition_entry = nested(response, "EpochEndOffset")
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            tp = TopicPartition(topic.topic, int(p.partition))
            if tp in refused:
                code, epoch, offset = ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, -1
            else:
                code, epoch, offset = _answer(
                    context, ends[tp], int(p.current_leader_epoch), int(p.leader_epoch)
                )
            partitions.append(
                build(
                    partition_entry,
                    error_code=wire(code),
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=offset,
                )
            )
        topics.append(build(topic_entry, topic=topic.topic, partitions=tuple(partitions)))
    return build(response, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def _log_ends(
    context: BrokerContext, partitions: list[TopicPartition]
) -> dict[TopicPartition, ListOffsetsResult]:
    """Each partition's log end offset (UNKNOWN_TOPIC_OR_PARTITION for one that does not
    exist), as ListOffsets answers LATEST."""
    try:
        return await context.broker.list_offsets(
            dict.fromkeys(partitions, OffsetSpec.LATEST),
            isolation_level=IsolationLevel.READ_UNCOMMITTED,
        )
    except DisklessError as e:
        code = failure_code(
            list_offsets_error, e, f"offsets for leader epochs on broker {context.broker_id}"
        )
        return dict.fromkeys(partitions, ListOffsetsResult(code))


def _answer(
    context: BrokerContext, end: ListOffsetsResult, current_leader_epoch: int, leader_epoch: int
) -> tuple[ErrorCode, int, int]:
    """(error, epoch, end offset) of one partition: see the module doc."""
    if end.error is not ErrorCode.NONE:
        return end.error, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    code = context.cluster.check_epoch(current_leader_epoch)
    if code is not ErrorCode.NONE:
        return code, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if leader_epoch < 0:
        return ErrorCode.NONE, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    return ErrorCode.NONE, min(leader_epoch, context.cluster.generation), end.offset
