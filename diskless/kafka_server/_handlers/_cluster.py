"""The cluster as operators' tools see it: DescribeCluster, DescribeLogDirs and ElectLeaders.

- DescribeCluster lists the live brokers at their endpoint of the client's listener, the
  cluster's id, and as controller the broker answering (Kafka's brokers name a live broker
  there; this one is, and it serves the admin APIs a controller would). No broker is ever
  fenced in the answer: a fenced incarnation is gone from the registry. Only brokers are
  described (`endpoint_type` 1); asking for controllers is MISMATCHED_ENDPOINT_TYPE, as a
  broker of Kafka answers, an unknown type UNSUPPORTED_ENDPOINT_TYPE. No ACL is needed; KIP-430's
  cluster operations are answered when asked (none without DESCRIBE on the cluster).
- DescribeLogDirs answers with no log directory. A diskless broker keeps no partition in a log
  directory: batches live in object storage, indexed by the batch coordinator, and a broker's
  write-ahead buffer is no replica of anything. Kafka lists a partition only under the log
  directory holding one of its replicas, so every partition is absent here, and a tool summing
  sizes per broker counts nothing on a disk of a broker, which is the truth. Needs DESCRIBE on
  the cluster (else CLUSTER_AUTHORIZATION_FAILED, and no directories).
- ElectLeaders: a partition has a leader as long as a broker is live (Metadata names the
  produce representative of the client's rack, and every broker accepts every partition), so
  no election is ever needed: each partition named is ELECTION_NOT_NEEDED, as Kafka answers a
  partition whose leader is already the preferred (or, for an unclean election, any) one; with
  no live broker, PREFERRED_LEADER_NOT_AVAILABLE or ELIGIBLE_LEADERS_NOT_AVAILABLE. A missing
  topic or partition is UNKNOWN_TOPIC_OR_PARTITION. Asked for every partition (no topics
  named), the answer leaves out those whose election was not needed, as Kafka's does. Needs
  ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED for the request).
"""

from __future__ import annotations

from typing import Final

from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._types import TopicPartition
from diskless.kafka_server._handlers._access import ALTER, DESCRIBE, OPERATIONS_NOT_ASKED, Access
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response
from diskless.kafka_server._handlers.context import BrokerContext, Session
from diskless.kafka_server._protocol.fields import build, nested
from diskless.kafka_server._protocol.messages_cluster import (
    DescribeClusterRequest,
    DescribeLogDirsRequest,
    ElectLeadersRequest,
)

_ENDPOINT_BROKERS: Final = 1
_ENDPOINT_CONTROLLERS: Final = 2
_ELECTION_PREFERRED: Final = 0
_ELECTION_UNCLEAN: Final = 1
_NO_LEADER: Final = {
    _ELECTION_PREFERRED: WireError.preferred_leader_not_available,
    _ELECTION_UNCLEAN: WireError.eligible_leaders_not_available,
}
"""The code of a partition that no live broker can lead, per election type."""


# --- DescribeCluster ------------------------------------------------------------------------------
async def handle_describe_cluster(
    context: BrokerContext, session: Session, request: DescribeClusterRequest, response: Response
) -> ResponsePayload:
    endpoint = int(getattr(request, "endpoint_type", _ENDPOINT_BROKERS))  # v1+
    if endpoint != _ENDPOINT_BROKERS:
        error = (
            WireError.mismatched_endpoint_type
            if endpoint == _ENDPOINT_CONTROLLERS
            else WireError.unsupported_endpoint_type
        )
        return build(
            response,
            throttle_time=NO_THROTTLE,
            error_code=error,
            error_message=f"this broker describes brokers (endpoint type 1), not {endpoint}",
            cluster_id="",
            brokers=(),
        )
    access = Access(context, session)
    operations = (
        access.cluster_operations()
        if request.include_cluster_authorized_operations
        else OPERATIONS_NOT_ASKED
    )
    entry = nested(response, "DescribeClusterBroker")
    listed = [
        (b, where)
        for b in context.cluster.brokers()
        if (where := b.on(session.listener)) is not None
    ]
    ids = [b.broker_id for b, _ in listed]
    controller = context.broker_id if context.broker_id in ids else (ids or [-1])[0]
    brokers = [
        build(
            entry,
            broker_id=b.broker_id,
            host=where[0],
            port=where[1],
            rack=b.rack,
            is_fenced=False,
        )
        for b, where in listed
    ]
    return build(
        response,
        throttle_time=NO_THROTTLE,
        error_code=WireError.none,
        error_message=None,
        endpoint_type=_ENDPOINT_BROKERS,
        cluster_id=context.cluster.cluster_id,
        controller_id=controller,
        brokers=tuple(brokers),
        cluster_authorized_operations=operations,
    )


# --- DescribeLogDirs ------------------------------------------------------------------------------
async def handle_describe_log_dirs(
    context: BrokerContext, session: Session, request: DescribeLogDirsRequest, response: Response
) -> ResponsePayload:
    allowed = Access(context, session).cluster(DESCRIBE)
    error = WireError.none if allowed else WireError.cluster_authorization_failed
    return build(response, throttle_time=NO_THROTTLE, error_code=error, results=())


# --- ElectLeaders ---------------------------------------------------------------------------------
async def handle_elect_leaders(
    context: BrokerContext, session: Session, request: ElectLeadersRequest, response: Response
) -> ResponsePayload:
    if not Access(context, session).cluster(ALTER):
        return elect_leaders_error_response(
            request, response, WireError.cluster_authorization_failed
        )
    election = int(getattr(request, "election_type", _ELECTION_PREFERRED))  # v1+
    if election not in _NO_LEADER:
        return elect_leaders_error_response(request, response, WireError.invalid_request)
    everything = request.topic_partitions is None
    asked = (
        None if request.topic_partitions is None else [t.topic for t in request.topic_partitions]
    )
    counts = {
        d.name: d.partitions
        for d in await context.broker.describe_topics(None if asked is None else sorted(set(asked)))
    }
    if request.topic_partitions is None:
        wanted = [(name, tuple(range(count))) for name, count in sorted(counts.items())]
    else:
        wanted = [(t.topic, tuple(int(p) for p in t.partitions)) for t in request.topic_partitions]
    existing = [
        TopicPartition(name, p) for name, ps in wanted for p in ps if 0 <= p < counts.get(name, 0)
    ]
    led = context.cluster.leaders(existing, context.rack) if context.cluster.brokers() else {}
    topic_entry = nested(response, "ReplicaElectionResult")
    partition_entry = nested(response, "PartitionResult")
    results = []
    for name, partitions in wanted:
        entries: list[Entity] = []
        for p in partitions:
            error, message = _election(name, p, counts, led, election)
            if everything and error is WireError.election_not_needed:
                continue  # Kafka lists only the partitions an election was tried for
            entries.append(
                build(partition_entry, partition_id=p, error_code=error, error_message=message)
            )
        results.append(build(topic_entry, topic=name, partition_result=tuple(entries)))
    return build(
        response,
        throttle_time=NO_THROTTLE,
        error_code=WireError.none,
        replica_election_results=tuple(results),
    )


def _election(
    topic: str,
    partition: int,
    counts: dict[str, int],
    led: dict[TopicPartition, int],
    election: int,
) -> tuple[WireError, str | None]:
    """A partition's answer: Kafka's `ReplicationControlManager.electLeader`."""
    if topic not in counts:
        return WireError.unknown_topic_or_partition, f"No such topic as {topic}"
    if not 0 <= partition < counts[topic]:
        message = f"No such partition as {topic}-{partition}"
        return WireError.unknown_topic_or_partition, message
    if TopicPartition(topic, partition) in led:
        return WireError.election_not_needed, None
    return _NO_LEADER[election], "no live broker can lead the partition"


def elect_leaders_error_response(
    request: ElectLeadersRequest, response: Response, code: WireError
) -> ResponsePayload:
    """The whole request answered `code` (Kafka's `ElectLeadersRequest.getErrorResponse`): at
    the top (v1+) and on every partition named."""
    topic_entry = nested(response, "ReplicaElectionResult")
    partition_entry = nested(response, "PartitionResult")
    results = tuple(
        build(
            topic_entry,
            topic=t.topic,
            partition_result=tuple(
                build(partition_entry, partition_id=p, error_code=code, error_message=None)
                for p in t.partitions
            ),
        )
        for t in request.topic_partitions or ()
    )
    return build(
        response, throttle_time=NO_THROTTLE, error_code=code, replica_election_results=results
    )
