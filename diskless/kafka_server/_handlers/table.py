"""The handler of every API key: each decodes its typed request, calls the library, builds the
typed response (the families live in `_handle_*`; `_route` says how a request reaches them).

Handlers are written once for every advertised version: values are named as kio names the fields
and `build` keeps those the requested version has. Protocol outcomes are error codes in the
response; library exceptions become retriable codes through `_errors`, the one place that maps
them.
"""

from __future__ import annotations

from typing import Final

from kio.schema.errors import ErrorCode as WireError

from diskless.kafka_server._handlers._admin import (
    handle_create_partitions,
    handle_create_topics,
    handle_delete_records,
    handle_delete_topics,
    handle_describe_configs,
)
from diskless.kafka_server._handlers._discovery import (
    api_versions_response,
    handle_api_versions,
    handle_find_coordinator,
    handle_metadata,
)
from diskless.kafka_server._handlers._fetch import handle_fetch, handle_list_offsets
from diskless.kafka_server._handlers._groups import (
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_offset_commit,
    handle_offset_fetch,
    handle_sync_group,
)
from diskless.kafka_server._handlers._produce import handle_produce
from diskless.kafka_server._handlers._route import Handler, Route
from diskless.kafka_server._handlers._transactions import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_end_txn,
    handle_init_producer_id,
    handle_txn_offset_commit,
)
from diskless.kafka_server._protocol import messages
from diskless.kafka_server._protocol import messages_admin as admin
from diskless.kafka_server._protocol.versions import (
    API_VERSIONS_FALLBACK,
    SUPPORTED_VERSIONS,
    ApiKey,
)

# The type arguments tie each union to its handler's annotations (mypy checks that); the values
# are the same unions, which `Route` checks every request against at run time.
_API_VERSIONS: Final = Route[messages.ApiVersionsRequest, messages.ApiVersionsResponse](
    ApiKey.API_VERSIONS,
    messages.ApiVersionsRequest,
    messages.ApiVersionsResponse,
    handle_api_versions,
)

HANDLERS: Final[dict[ApiKey, Handler]] = {
    ApiKey.API_VERSIONS: _API_VERSIONS,
    ApiKey.METADATA: Route[messages.MetadataRequest, messages.MetadataResponse](
        ApiKey.METADATA, messages.MetadataRequest, messages.MetadataResponse, handle_metadata
    ),
    ApiKey.PRODUCE: Route[messages.ProduceRequest, messages.ProduceResponse](
        ApiKey.PRODUCE, messages.ProduceRequest, messages.ProduceResponse, handle_produce
    ),
    ApiKey.FETCH: Route[messages.FetchRequest, messages.FetchResponse](
        ApiKey.FETCH, messages.FetchRequest, messages.FetchResponse, handle_fetch
    ),
    ApiKey.LIST_OFFSETS: Route[messages.ListOffsetsRequest, messages.ListOffsetsResponse](
        ApiKey.LIST_OFFSETS,
        messages.ListOffsetsRequest,
        messages.ListOffsetsResponse,
        handle_list_offsets,
    ),
    ApiKey.FIND_COORDINATOR: Route[
        messages.FindCoordinatorRequest, messages.FindCoordinatorResponse
    ](
        ApiKey.FIND_COORDINATOR,
        messages.FindCoordinatorRequest,
        messages.FindCoordinatorResponse,
        handle_find_coordinator,
    ),
    ApiKey.INIT_PRODUCER_ID: Route[messages.InitProducerIdRequest, messages.InitProducerIdResponse](
        ApiKey.INIT_PRODUCER_ID,
        messages.InitProducerIdRequest,
        messages.InitProducerIdResponse,
        handle_init_producer_id,
    ),
    ApiKey.ADD_PARTITIONS_TO_TXN: Route[
        messages.AddPartitionsToTxnRequest, messages.AddPartitionsToTxnResponse
    ](
        ApiKey.ADD_PARTITIONS_TO_TXN,
        messages.AddPartitionsToTxnRequest,
        messages.AddPartitionsToTxnResponse,
        handle_add_partitions_to_txn,
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: Route[
        messages.AddOffsetsToTxnRequest, messages.AddOffsetsToTxnResponse
    ](
        ApiKey.ADD_OFFSETS_TO_TXN,
        messages.AddOffsetsToTxnRequest,
        messages.AddOffsetsToTxnResponse,
        handle_add_offsets_to_txn,
    ),
    ApiKey.TXN_OFFSET_COMMIT: Route[
        messages.TxnOffsetCommitRequest, messages.TxnOffsetCommitResponse
    ](
        ApiKey.TXN_OFFSET_COMMIT,
        messages.TxnOffsetCommitRequest,
        messages.TxnOffsetCommitResponse,
        handle_txn_offset_commit,
    ),
    ApiKey.END_TXN: Route[messages.EndTxnRequest, messages.EndTxnResponse](
        ApiKey.END_TXN, messages.EndTxnRequest, messages.EndTxnResponse, handle_end_txn
    ),
    ApiKey.OFFSET_COMMIT: Route[messages.OffsetCommitRequest, messages.OffsetCommitResponse](
        ApiKey.OFFSET_COMMIT,
        messages.OffsetCommitRequest,
        messages.OffsetCommitResponse,
        handle_offset_commit,
    ),
    ApiKey.OFFSET_FETCH: Route[messages.OffsetFetchRequest, messages.OffsetFetchResponse](
        ApiKey.OFFSET_FETCH,
        messages.OffsetFetchRequest,
        messages.OffsetFetchResponse,
        handle_offset_fetch,
    ),
    ApiKey.JOIN_GROUP: Route[messages.JoinGroupRequest, messages.JoinGroupResponse](
        ApiKey.JOIN_GROUP, messages.JoinGroupRequest, messages.JoinGroupResponse, handle_join_group
    ),
    ApiKey.SYNC_GROUP: Route[messages.SyncGroupRequest, messages.SyncGroupResponse](
        ApiKey.SYNC_GROUP, messages.SyncGroupRequest, messages.SyncGroupResponse, handle_sync_group
    ),
    ApiKey.HEARTBEAT: Route[messages.HeartbeatRequest, messages.HeartbeatResponse](
        ApiKey.HEARTBEAT, messages.HeartbeatRequest, messages.HeartbeatResponse, handle_heartbeat
    ),
    ApiKey.LEAVE_GROUP: Route[messages.LeaveGroupRequest, messages.LeaveGroupResponse](
        ApiKey.LEAVE_GROUP,
        messages.LeaveGroupRequest,
        messages.LeaveGroupResponse,
        handle_leave_group,
    ),
    ApiKey.CREATE_TOPICS: Route[admin.CreateTopicsRequest, admin.CreateTopicsResponse](
        ApiKey.CREATE_TOPICS,
        admin.CreateTopicsRequest,
        admin.CreateTopicsResponse,
        handle_create_topics,
    ),
    ApiKey.DELETE_TOPICS: Route[admin.DeleteTopicsRequest, admin.DeleteTopicsResponse](
        ApiKey.DELETE_TOPICS,
        admin.DeleteTopicsRequest,
        admin.DeleteTopicsResponse,
        handle_delete_topics,
    ),
    ApiKey.CREATE_PARTITIONS: Route[admin.CreatePartitionsRequest, admin.CreatePartitionsResponse](
        ApiKey.CREATE_PARTITIONS,
        admin.CreatePartitionsRequest,
        admin.CreatePartitionsResponse,
        handle_create_partitions,
    ),
    ApiKey.DESCRIBE_CONFIGS: Route[admin.DescribeConfigsRequest, admin.DescribeConfigsResponse](
        ApiKey.DESCRIBE_CONFIGS,
        admin.DescribeConfigsRequest,
        admin.DescribeConfigsResponse,
        handle_describe_configs,
    ),
    ApiKey.DELETE_RECORDS: Route[admin.DeleteRecordsRequest, admin.DeleteRecordsResponse](
        ApiKey.DELETE_RECORDS,
        admin.DeleteRecordsRequest,
        admin.DeleteRecordsResponse,
        handle_delete_records,
    ),
}
assert HANDLERS.keys() == SUPPORTED_VERSIONS.keys()


def unsupported_api_versions_response() -> messages.ApiVersionsResponse:
    """Kafka's answer to an ApiVersions request of a version it does not support (see
    `_versions.API_VERSIONS_FALLBACK`)."""
    schema = _API_VERSIONS.response_schema(API_VERSIONS_FALLBACK)
    return api_versions_response(schema, WireError.unsupported_version)
