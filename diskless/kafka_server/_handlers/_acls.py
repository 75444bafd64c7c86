"""CreateAcls, DescribeAcls, DeleteAcls: Kafka's ACL administration, over the batch coordinator.

The bindings live in the batch coordinator, so whichever broker is asked changes them for the
whole cluster. Creating and deleting need ALTER on the cluster, describing DESCRIBE on it
(CLUSTER_AUTHORIZATION_FAILED otherwise); without an authorizer each answers
SECURITY_DISABLED, as Kafka does. A change is loaded into this process's ACLs before it is
answered, so it applies at once to the next request here; other processes follow within
`acl_refresh_ms` (`_coordination.acl_cache`).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from typing import Final

from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import ResponsePayload

from diskless._kafka_errors import admin_error
from diskless.coordinator import AclBinding, AclOperation, binding_from_codes, filter_from_codes
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.acl_cache import AclCache
from diskless.kafka_server._handlers._access import ALTER, DESCRIBE, Access
from diskless.kafka_server._handlers._errors import failure
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response
from diskless.kafka_server._handlers.context import BrokerContext, Session
from diskless.kafka_server._protocol.fields import build, nested, wire
from diskless.kafka_server._protocol.messages_admin import (
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
)

SECURITY_DISABLED_MESSAGE: Final = "No Authorizer is configured on the broker"


def _refusal(context: BrokerContext, session: Session, needs: AclOperation) -> WireError | None:
    """Why the request is refused before it runs: no authorizer, or not allowed."""
    access = Access(context, session)
    if not access.enabled:
        return WireError.security_disabled
    if not access.cluster(needs):
        return WireError.cluster_authorization_failed
    return None


def _acls(context: BrokerContext) -> AclCache:
    assert context.acls is not None, "refused before: SECURITY_DISABLED"
    return context.acls


def _message(error: WireError) -> str | None:
    if error is WireError.security_disabled:
        return SECURITY_DISABLED_MESSAGE
    return None


async def handle_create_acls(
    context: BrokerContext, session: Session, request: CreateAclsRequest, response: Response
) -> ResponsePayload:
    result_entry = nested(response, "AclCreationResult")
    refused = _refusal(context, session, ALTER)
    if refused is not None:
        results = [(refused, _message(refused))] * len(request.creations)
    else:
        bindings = [
            binding_from_codes(
                c.resource_type,
                c.resource_name,
                c.resource_pattern_type,
                c.principal,
                c.host,
                c.operation,
                c.permission_type,
            )
            for c in request.creations
        ]
        try:
            outcomes = await _acls(context).create(bindings)
            results = [(wire(o.error), o.message) for o in outcomes]
        except DisklessError as e:
            results = [(failure(admin_error, e, "create acls"), None)] * len(bindings)
    return build(
        response,
        throttle_time=NO_THROTTLE,
        results=tuple(
            build(result_entry, error_code=code, error_message=message) for code, message in results
        ),
    )


async def handle_describe_acls(
    context: BrokerContext, session: Session, request: DescribeAclsRequest, response: Response
) -> ResponsePayload:
    resource_entry = nested(response, "DescribeAclsResource")
    acl_entry = nested(response, "AclDescription")
    error = _refusal(context, session, DESCRIBE)
    found: list[AclBinding] = []
    if error is None:
        acl_filter = filter_from_codes(
            request.resource_type_filter,
            request.resource_name_filter,
            request.pattern_type_filter,
            request.principal_filter,
            request.host_filter,
            request.operation,
            request.permission_type,
        )
        try:
            found = await _acls(context).describe(acl_filter)
            error = WireError.none
        except DisklessError as e:
            error = failure(admin_error, e, "describe acls")
    resources = [
        build(
            resource_entry,
            resource_type=int(resource[0]),
            resource_name=resource[1],
            pattern_type=int(resource[2]),
            acls=tuple(
                build(
                    acl_entry,
                    principal=b.principal,
                    host=b.host,
                    operation=int(b.operation),
                    permission_type=int(b.permission),
                )
                for b in bindings
            ),
        )
        for resource, bindings in groupby(found, key=lambda b: b[:3])
    ]
    return build(
        response,
        throttle_time=NO_THROTTLE,
        error_code=error,
        error_message=_message(error),
        resources=tuple(resources),
    )


async def handle_delete_acls(
    context: BrokerContext, session: Session, request: DeleteAclsRequest, response: Response
) -> ResponsePayload:
    result_entry = nested(response, "DeleteAclsFilterResult")
    matching_entry = nested(response, "DeleteAclsMatchingAcl")
    refused = _refusal(context, session, ALTER)
    results: Sequence[tuple[WireError, str | None, Sequence[AclBinding]]]
    if refused is not None:
        results = [(refused, _message(refused), ())] * len(request.filters)
    else:
        filters = [
            filter_from_codes(
                f.resource_type_filter,
                f.resource_name_filter,
                f.pattern_type_filter,
                f.principal_filter,
                f.host_filter,
                f.operation,
                f.permission_type,
            )
            for f in request.filters
        ]
        try:
            deletions = await _acls(context).delete(filters)
            results = [(wire(d.error), d.message, d.deleted) for d in deletions]
        except DisklessError as e:
            results = [(failure(admin_error, e, "delete acls"), None, ())] * len(filters)
    return build(
        response,
        throttle_time=NO_THROTTLE,
        filter_results=tuple(
            build(
                result_entry,
                error_code=code,
                error_message=message,
                matching_acls=tuple(
                    build(
                        matching_entry,
                        error_code=WireError.none,
                        error_message=None,
                        resource_type=int(b.resource_type),
                        resource_name=b.resource_name,
                        pattern_type=int(b.pattern_type),
                        principal=b.principal,
                        host=b.host,
                        operation=int(b.operation),
                        permission_type=int(b.permission),
                    )
                    for b in deleted
                ),
            )
            for code, message, deleted in results
        ),
    )
