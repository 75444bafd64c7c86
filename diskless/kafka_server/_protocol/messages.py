"""The advertised versions of every API, declared once: a union of kio request classes per API.

kio generates one frozen dataclass per (API, version, direction). A handler serves every version
of its API with one body, so it takes the union of the request classes: mypy then checks each
field it reads against every version (a field some versions lack must be narrowed with
`isinstance` first). The union is the whole declaration: `apis.Api` reads the API key, the version
range and each version's response class from it, and the handler table (`_handlers.table`) reads
the union from the handler's annotation. The admin APIs' unions are in `messages_admin`.

The ranges cover what the three client libraries of the acceptance tests negotiate (each picks
the highest version both sides support): librdkafka 2.x, kafka-python 3.x and aiokafka 0.14
(which tops out at Produce v8, Fetch v11, Metadata v5). Upper bounds that are deliberate:
- Produce v11 / Fetch v12: v13 of both address topics by topic id (KIP-516); this server
  addresses them by name. Produce v12 is the transaction-version-2 marker (KIP-890 part 2:
  the broker enrolls partitions itself), which the clients here do not use.
- AddPartitionsToTxn v3 / AddOffsetsToTxn v3 / TxnOffsetCommit v3 / EndTxn v3 /
  InitProducerId v4: the client-side transaction protocol (transaction version 1, see
  `_coordination.txn_front`). v4+ of AddPartitionsToTxn is broker-to-broker; v4 of
  AddOffsetsToTxn, TxnOffsetCommit and EndTxn only add TRANSACTION_ABORTABLE (KIP-890), which
  this server does not send.
- FindCoordinator v4: batched keys; v5/v6 only add error codes and share groups.
- ListOffsets v7 (MAX_TIMESTAMP); v8+ add tiered-storage and remote offsets specs.
- OffsetFetch v7: v8 batches several groups in one request.
- OffsetForLeaderEpoch v2..v4: kio's models start at v2 (v2 added `current_leader_epoch`, which
  librdkafka sends); v4 is the last.
Lower bounds are kio's oldest models (Produce v3 is also the first with transactional ids and
record batch v2, which is all the library stores).
"""

from __future__ import annotations

from typing import TypeAlias

import kio.schema.add_offsets_to_txn.v0 as add_offsets_to_txn_v0
import kio.schema.add_offsets_to_txn.v1 as add_offsets_to_txn_v1
import kio.schema.add_offsets_to_txn.v2 as add_offsets_to_txn_v2
import kio.schema.add_offsets_to_txn.v3 as add_offsets_to_txn_v3
import kio.schema.add_partitions_to_txn.v0 as add_partitions_to_txn_v0
import kio.schema.add_partitions_to_txn.v1 as add_partitions_to_txn_v1
import kio.schema.add_partitions_to_txn.v2 as add_partitions_to_txn_v2
import kio.schema.add_partitions_to_txn.v3 as add_partitions_to_txn_v3
import kio.schema.api_versions.v0 as api_versions_v0
import kio.schema.api_versions.v1 as api_versions_v1
import kio.schema.api_versions.v2 as api_versions_v2
import kio.schema.api_versions.v3 as api_versions_v3
import kio.schema.consumer_group_describe.v0 as consumer_group_describe_v0
import kio.schema.consumer_group_describe.v1 as consumer_group_describe_v1
import kio.schema.consumer_group_heartbeat.v0 as consumer_group_heartbeat_v0
import kio.schema.consumer_group_heartbeat.v1 as consumer_group_heartbeat_v1
import kio.schema.end_txn.v0 as end_txn_v0
import kio.schema.end_txn.v1 as end_txn_v1
import kio.schema.end_txn.v2 as end_txn_v2
import kio.schema.end_txn.v3 as end_txn_v3
import kio.schema.fetch.v4 as fetch_v4
import kio.schema.fetch.v5 as fetch_v5
import kio.schema.fetch.v6 as fetch_v6
import kio.schema.fetch.v7 as fetch_v7
import kio.schema.fetch.v8 as fetch_v8
import kio.schema.fetch.v9 as fetch_v9
import kio.schema.fetch.v10 as fetch_v10
import kio.schema.fetch.v11 as fetch_v11
import kio.schema.fetch.v12 as fetch_v12
import kio.schema.find_coordinator.v0 as find_coordinator_v0
import kio.schema.find_coordinator.v1 as find_coordinator_v1
import kio.schema.find_coordinator.v2 as find_coordinator_v2
import kio.schema.find_coordinator.v3 as find_coordinator_v3
import kio.schema.find_coordinator.v4 as find_coordinator_v4
import kio.schema.heartbeat.v0 as heartbeat_v0
import kio.schema.heartbeat.v1 as heartbeat_v1
import kio.schema.heartbeat.v2 as heartbeat_v2
import kio.schema.heartbeat.v3 as heartbeat_v3
import kio.schema.heartbeat.v4 as heartbeat_v4
import kio.schema.init_producer_id.v0 as init_producer_id_v0
import kio.schema.init_producer_id.v1 as init_producer_id_v1
import kio.schema.init_producer_id.v2 as init_producer_id_v2
import kio.schema.init_producer_id.v3 as init_producer_id_v3
import kio.schema.init_producer_id.v4 as init_producer_id_v4
import kio.schema.join_group.v0 as join_group_v0
import kio.schema.join_group.v1 as join_group_v1
import kio.schema.join_group.v2 as join_group_v2
import kio.schema.join_group.v3 as join_group_v3
import kio.schema.join_group.v4 as join_group_v4
import kio.schema.join_group.v5 as join_group_v5
import kio.schema.join_group.v6 as join_group_v6
import kio.schema.join_group.v7 as join_group_v7
import kio.schema.leave_group.v0 as leave_group_v0
import kio.schema.leave_group.v1 as leave_group_v1
import kio.schema.leave_group.v2 as leave_group_v2
import kio.schema.leave_group.v3 as leave_group_v3
import kio.schema.leave_group.v4 as leave_group_v4
import kio.schema.list_offsets.v1 as list_offsets_v1
import kio.schema.list_offsets.v2 as list_offsets_v2
import kio.schema.list_offsets.v3 as list_offsets_v3
import kio.schema.list_offsets.v4 as list_offsets_v4
import kio.schema.list_offsets.v5 as list_offsets_v5
import kio.schema.list_offsets.v6 as list_offsets_v6
import kio.schema.list_offsets.v7 as list_offsets_v7
import kio.schema.metadata.v0 as metadata_v0
import kio.schema.metadata.v1 as metadata_v1
import kio.schema.metadata.v2 as metadata_v2
import kio.schema.metadata.v3 as metadata_v3
import kio.schema.metadata.v4 as metadata_v4
import kio.schema.metadata.v5 as metadata_v5
import kio.schema.metadata.v6 as metadata_v6
import kio.schema.metadata.v7 as metadata_v7
import kio.schema.metadata.v8 as metadata_v8
import kio.schema.metadata.v9 as metadata_v9
import kio.schema.metadata.v10 as metadata_v10
import kio.schema.metadata.v11 as metadata_v11
import kio.schema.metadata.v12 as metadata_v12
import kio.schema.offset_commit.v2 as offset_commit_v2
import kio.schema.offset_commit.v3 as offset_commit_v3
import kio.schema.offset_commit.v4 as offset_commit_v4
import kio.schema.offset_commit.v5 as offset_commit_v5
import kio.schema.offset_commit.v6 as offset_commit_v6
import kio.schema.offset_commit.v7 as offset_commit_v7
import kio.schema.offset_commit.v8 as offset_commit_v8
import kio.schema.offset_fetch.v1 as offset_fetch_v1
import kio.schema.offset_fetch.v2 as offset_fetch_v2
import kio.schema.offset_fetch.v3 as offset_fetch_v3
import kio.schema.offset_fetch.v4 as offset_fetch_v4
import kio.schema.offset_fetch.v5 as offset_fetch_v5
import kio.schema.offset_fetch.v6 as offset_fetch_v6
import kio.schema.offset_fetch.v7 as offset_fetch_v7
import kio.schema.offset_for_leader_epoch.v2 as offset_for_leader_epoch_v2
import kio.schema.offset_for_leader_epoch.v3 as offset_for_leader_epoch_v3
import kio.schema.offset_for_leader_epoch.v4 as offset_for_leader_epoch_v4
import kio.schema.produce.v3 as produce_v3
import kio.schema.produce.v4 as produce_v4
import kio.schema.produce.v5 as produce_v5
import kio.schema.produce.v6 as produce_v6
import kio.schema.produce.v7 as produce_v7
import kio.schema.produce.v8 as produce_v8
import kio.schema.produce.v9 as produce_v9
import kio.schema.produce.v10 as produce_v10
import kio.schema.produce.v11 as produce_v11
import kio.schema.sync_group.v0 as sync_group_v0
import kio.schema.sync_group.v1 as sync_group_v1
import kio.schema.sync_group.v2 as sync_group_v2
import kio.schema.sync_group.v3 as sync_group_v3
import kio.schema.sync_group.v4 as sync_group_v4
import kio.schema.sync_group.v5 as sync_group_v5
import kio.schema.txn_offset_commit.v0 as txn_offset_commit_v0
import kio.schema.txn_offset_commit.v1 as txn_offset_commit_v1
import kio.schema.txn_offset_commit.v2 as txn_offset_commit_v2
import kio.schema.txn_offset_commit.v3 as txn_offset_commit_v3

ProduceRequest: TypeAlias = (
    produce_v3.ProduceRequest
    | produce_v4.ProduceRequest
    | produce_v5.ProduceRequest
    | produce_v6.ProduceRequest
    | produce_v7.ProduceRequest
    | produce_v8.ProduceRequest
    | produce_v9.ProduceRequest
    | produce_v10.ProduceRequest
    | produce_v11.ProduceRequest
)
FetchRequest: TypeAlias = (
    fetch_v4.FetchRequest
    | fetch_v5.FetchRequest
    | fetch_v6.FetchRequest
    | fetch_v7.FetchRequest
    | fetch_v8.FetchRequest
    | fetch_v9.FetchRequest
    | fetch_v10.FetchRequest
    | fetch_v11.FetchRequest
    | fetch_v12.FetchRequest
)
ListOffsetsRequest: TypeAlias = (
    list_offsets_v1.ListOffsetsRequest
    | list_offsets_v2.ListOffsetsRequest
    | list_offsets_v3.ListOffsetsRequest
    | list_offsets_v4.ListOffsetsRequest
    | list_offsets_v5.ListOffsetsRequest
    | list_offsets_v6.ListOffsetsRequest
    | list_offsets_v7.ListOffsetsRequest
)
OffsetForLeaderEpochRequest: TypeAlias = (
    offset_for_leader_epoch_v2.OffsetForLeaderEpochRequest
    | offset_for_leader_epoch_v3.OffsetForLeaderEpochRequest
    | offset_for_leader_epoch_v4.OffsetForLeaderEpochRequest
)
MetadataRequest: TypeAlias = (
    metadata_v0.MetadataRequest
    | metadata_v1.MetadataRequest
    | metadata_v2.MetadataRequest
    | metadata_v3.MetadataRequest
    | metadata_v4.MetadataRequest
    | metadata_v5.MetadataRequest
    | metadata_v6.MetadataRequest
    | metadata_v7.MetadataRequest
    | metadata_v8.MetadataRequest
    | metadata_v9.MetadataRequest
    | metadata_v10.MetadataRequest
    | metadata_v11.MetadataRequest
    | metadata_v12.MetadataRequest
)
OffsetCommitRequest: TypeAlias = (
    offset_commit_v2.OffsetCommitRequest
    | offset_commit_v3.OffsetCommitRequest
    | offset_commit_v4.OffsetCommitRequest
    | offset_commit_v5.OffsetCommitRequest
    | offset_commit_v6.OffsetCommitRequest
    | offset_commit_v7.OffsetCommitRequest
    | offset_commit_v8.OffsetCommitRequest
)
OffsetFetchRequest: TypeAlias = (
    offset_fetch_v1.OffsetFetchRequest
    | offset_fetch_v2.OffsetFetchRequest
    | offset_fetch_v3.OffsetFetchRequest
    | offset_fetch_v4.OffsetFetchRequest
    | offset_fetch_v5.OffsetFetchRequest
    | offset_fetch_v6.OffsetFetchRequest
    | offset_fetch_v7.OffsetFetchRequest
)
FindCoordinatorRequest: TypeAlias = (
    find_coordinator_v0.FindCoordinatorRequest
    | find_coordinator_v1.FindCoordinatorRequest
    | find_coordinator_v2.FindCoordinatorRequest
    | find_coordinator_v3.FindCoordinatorRequest
    | find_coordinator_v4.FindCoordinatorRequest
)
JoinGroupRequest: TypeAlias = (
    join_group_v0.JoinGroupRequest
    | join_group_v1.JoinGroupRequest
    | join_group_v2.JoinGroupRequest
    | join_group_v3.JoinGroupRequest
    | join_group_v4.JoinGroupRequest
    | join_group_v5.JoinGroupRequest
    | join_group_v6.JoinGroupRequest
    | join_group_v7.JoinGroupRequest
)
ConsumerGroupHeartbeatRequest: TypeAlias = (
    consumer_group_heartbeat_v0.ConsumerGroupHeartbeatRequest
    | consumer_group_heartbeat_v1.ConsumerGroupHeartbeatRequest
)
ConsumerGroupDescribeRequest: TypeAlias = (
    consumer_group_describe_v0.ConsumerGroupDescribeRequest
    | consumer_group_describe_v1.ConsumerGroupDescribeRequest
)
HeartbeatRequest: TypeAlias = (
    heartbeat_v0.HeartbeatRequest
    | heartbeat_v1.HeartbeatRequest
    | heartbeat_v2.HeartbeatRequest
    | heartbeat_v3.HeartbeatRequest
    | heartbeat_v4.HeartbeatRequest
)
LeaveGroupRequest: TypeAlias = (
    leave_group_v0.LeaveGroupRequest
    | leave_group_v1.LeaveGroupRequest
    | leave_group_v2.LeaveGroupRequest
    | leave_group_v3.LeaveGroupRequest
    | leave_group_v4.LeaveGroupRequest
)
SyncGroupRequest: TypeAlias = (
    sync_group_v0.SyncGroupRequest
    | sync_group_v1.SyncGroupRequest
    | sync_group_v2.SyncGroupRequest
    | sync_group_v3.SyncGroupRequest
    | sync_group_v4.SyncGroupRequest
    | sync_group_v5.SyncGroupRequest
)
ApiVersionsRequest: TypeAlias = (
    api_versions_v0.ApiVersionsRequest
    | api_versions_v1.ApiVersionsRequest
    | api_versions_v2.ApiVersionsRequest
    | api_versions_v3.ApiVersionsRequest
)
InitProducerIdRequest: TypeAlias = (
    init_producer_id_v0.InitProducerIdRequest
    | init_producer_id_v1.InitProducerIdRequest
    | init_producer_id_v2.InitProducerIdRequest
    | init_producer_id_v3.InitProducerIdRequest
    | init_producer_id_v4.InitProducerIdRequest
)
AddPartitionsToTxnRequest: TypeAlias = (
    add_partitions_to_txn_v0.AddPartitionsToTxnRequest
    | add_partitions_to_txn_v1.AddPartitionsToTxnRequest
    | add_partitions_to_txn_v2.AddPartitionsToTxnRequest
    | add_partitions_to_txn_v3.AddPartitionsToTxnRequest
)
EndTxnRequest: TypeAlias = (
    end_txn_v0.EndTxnRequest
    | end_txn_v1.EndTxnRequest
    | end_txn_v2.EndTxnRequest
    | end_txn_v3.EndTxnRequest
)
AddOffsetsToTxnRequest: TypeAlias = (
    add_offsets_to_txn_v0.AddOffsetsToTxnRequest
    | add_offsets_to_txn_v1.AddOffsetsToTxnRequest
    | add_offsets_to_txn_v2.AddOffsetsToTxnRequest
    | add_offsets_to_txn_v3.AddOffsetsToTxnRequest
)
TxnOffsetCommitRequest: TypeAlias = (
    txn_offset_commit_v0.TxnOffsetCommitRequest
    | txn_offset_commit_v1.TxnOffsetCommitRequest
    | txn_offset_commit_v2.TxnOffsetCommitRequest
    | txn_offset_commit_v3.TxnOffsetCommitRequest
)
