"""The handler table: one route per API key, each declared by its handler alone.

A handler's request annotation (a union of kio request classes, `_protocol.messages`) declares
its API key, the versions served and their response classes (`_route.Route`); the table lists the
handlers and derives the rest, so no key or range is written twice. ApiVersions answers with
this table's ranges, so its handler is the table's own.

Handlers are written once for every advertised version: values are named as kio names the fields
and `build` keeps those the requested version has. Protocol outcomes are error codes in the
response; a library failure becomes the code the library's error table gives the API's family
(`diskless._kafka_errors`). Where that code answers the whole request, the table names the family
and the request's error response, and the route answers it (`_route`); the other handlers answer
their failures themselves, entry by entry.
"""

from __future__ import annotations

from typing import Final

from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import ResponsePayload

from diskless._kafka_errors import admin_error, group_error, metadata_error, txn_error
from diskless.kafka_server._handlers._acls import (
    create_acls_error_response,
    delete_acls_error_response,
    describe_acls_error_response,
    handle_create_acls,
    handle_delete_acls,
    handle_describe_acls,
)
from diskless.kafka_server._handlers._admin import (
    create_partitions_error_response,
    handle_create_partitions,
    handle_create_topics,
    handle_delete_records,
    handle_delete_topics,
)
from diskless.kafka_server._handlers._cluster import (
    elect_leaders_error_response,
    handle_describe_cluster,
    handle_describe_log_dirs,
    handle_elect_leaders,
)
from diskless.kafka_server._handlers._configs import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from diskless.kafka_server._handlers._consumer_groups import (
    describe_error_response,
    handle_consumer_group_describe,
    handle_consumer_group_heartbeat,
    heartbeat_error_response,
)
from diskless.kafka_server._handlers._discovery import (
    api_versions_response,
    handle_find_coordinator,
    handle_metadata,
)
from diskless.kafka_server._handlers._epochs import handle_offset_for_leader_epoch
from diskless.kafka_server._handlers._fetch import handle_fetch, handle_list_offsets
from diskless.kafka_server._handlers._group_admin import (
    handle_delete_groups,
    handle_describe_groups,
    handle_list_groups,
    handle_offset_delete,
    list_groups_error_response,
)
from diskless.kafka_server._handlers._groups import (
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_offset_commit,
    handle_offset_fetch,
    handle_sync_group,
    join_group_error_response,
    leave_group_error_response,
    sync_group_error_response,
)
from diskless.kafka_server._handlers._produce import handle_produce
from diskless.kafka_server._handlers._route import Handler, Response, Route, error_response
from diskless.kafka_server._handlers._security import (
    handle_alter_user_scram_credentials,
    handle_describe_user_scram_credentials,
    handle_sasl_authenticate,
    handle_sasl_handshake,
)
from diskless.kafka_server._handlers._share_admin import (
    alter_offsets_error_response,
    delete_offsets_error_response,
    describe_offsets_error_response,
    handle_alter_share_group_offsets,
    handle_delete_share_group_offsets,
    handle_describe_share_group_offsets,
)
from diskless.kafka_server._handlers._share_fetch import (
    handle_share_acknowledge,
    handle_share_fetch,
)
from diskless.kafka_server._handlers._share_groups import (
    handle_share_group_describe,
    handle_share_group_heartbeat,
    share_describe_error_response,
    share_heartbeat_error_response,
)
from diskless.kafka_server._handlers._topic_partitions import (
    describe_topic_partitions_error_response,
    handle_describe_topic_partitions,
)
from diskless.kafka_server._handlers._transactions import (
    add_partitions_to_txn_error_response,
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_end_txn,
    handle_init_producer_id,
    handle_txn_offset_commit,
    init_producer_id_error_response,
)
from diskless.kafka_server._handlers._txn_admin import (
    describe_transactions_error_response,
    handle_describe_producers,
    handle_describe_transactions,
    handle_list_transactions,
    list_transactions_error_response,
)
from diskless.kafka_server._handlers.context import BrokerContext, Session
from diskless.kafka_server._protocol.apis import API_VERSIONS_FALLBACK, ApiKey
from diskless.kafka_server._protocol.messages import ApiVersionsRequest


async def handle_api_versions(
    context: BrokerContext, session: Session, request: ApiVersionsRequest, response: Response
) -> ResponsePayload:
    return api_versions_response(response, WireError.none, SUPPORTED_VERSIONS)


HANDLERS: Final[dict[ApiKey, Handler]] = {
    route.api.key: route
    for route in (
        Route(handle_api_versions),
        Route(handle_metadata),
        Route(handle_find_coordinator),
        Route(handle_produce),
        Route(handle_fetch),
        Route(handle_list_offsets),
        Route(handle_offset_for_leader_epoch),
        Route(handle_init_producer_id, txn_error, init_producer_id_error_response),
        Route(handle_add_partitions_to_txn, txn_error, add_partitions_to_txn_error_response),
        Route(handle_add_offsets_to_txn, txn_error, error_response),
        Route(handle_txn_offset_commit),
        Route(handle_end_txn, txn_error, error_response),
        Route(handle_offset_commit),
        Route(handle_offset_fetch),
        Route(handle_join_group, group_error, join_group_error_response),
        Route(handle_sync_group, group_error, sync_group_error_response),
        Route(handle_heartbeat, group_error, error_response),
        Route(handle_leave_group, group_error, leave_group_error_response),
        Route(handle_describe_groups),
        Route(handle_list_groups, group_error, list_groups_error_response),
        Route(handle_delete_groups),
        Route(handle_offset_delete),
        Route(handle_consumer_group_heartbeat, group_error, heartbeat_error_response),
        Route(handle_consumer_group_describe, group_error, describe_error_response),
        Route(handle_create_topics),
        Route(handle_delete_topics),
        Route(handle_create_partitions, admin_error, create_partitions_error_response),
        Route(handle_describe_configs),
        Route(handle_alter_configs),
        Route(handle_incremental_alter_configs),
        Route(handle_delete_records),
        Route(handle_sasl_handshake),
        Route(handle_sasl_authenticate),
        Route(handle_describe_user_scram_credentials),
        Route(handle_alter_user_scram_credentials),
        Route(handle_create_acls, admin_error, create_acls_error_response),
        Route(handle_describe_acls, admin_error, describe_acls_error_response),
        Route(handle_delete_acls, admin_error, delete_acls_error_response),
        Route(handle_describe_cluster),
        Route(
            handle_describe_topic_partitions,
            metadata_error,
            describe_topic_partitions_error_response,
        ),
        Route(handle_describe_log_dirs),
        Route(handle_elect_leaders, admin_error, elect_leaders_error_response),
        Route(handle_describe_producers),
        Route(handle_list_transactions, txn_error, list_transactions_error_response),
        Route(handle_describe_transactions, txn_error, describe_transactions_error_response),
        Route(handle_share_group_heartbeat, group_error, share_heartbeat_error_response),
        Route(handle_share_group_describe, group_error, share_describe_error_response),
        Route(handle_describe_share_group_offsets, group_error, describe_offsets_error_response),
        Route(handle_alter_share_group_offsets, group_error, alter_offsets_error_response),
        Route(handle_delete_share_group_offsets, group_error, delete_offsets_error_response),
        Route(handle_share_fetch),
        Route(handle_share_acknowledge),
    )
}

SUPPORTED_VERSIONS: Final[dict[ApiKey, tuple[int, int]]] = {
    key: HANDLERS[key].api.versions for key in sorted(HANDLERS)
}
"""(min, max) inclusive per API key, as advertised in ApiVersions."""


def route(api_key: int, api_version: int) -> Handler | None:
    """The handler of (api key, version); None when this server does not serve it."""
    try:
        handler = HANDLERS.get(ApiKey(api_key))
    except ValueError:
        return None
    return handler if handler is not None and handler.api.serves(api_version) else None


def unsupported_version_answer(api_key: int) -> ResponsePayload | None:
    """Kafka's answer to a request of a version it does not serve: ApiVersions answers v0 with
    UNSUPPORTED_VERSION and the supported ranges (`API_VERSIONS_FALLBACK`); every other API has
    no response shape for it, and the connection is closed (None)."""
    if api_key != ApiKey.API_VERSIONS:
        return None
    schema = HANDLERS[ApiKey.API_VERSIONS].api.response_schema(API_VERSIONS_FALLBACK)
    return api_versions_response(schema, WireError.unsupported_version, SUPPORTED_VERSIONS)
