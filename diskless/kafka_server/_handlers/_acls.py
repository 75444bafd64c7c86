"""CreateAcls, DescribeAcls, DeleteAcls: Kafka's ACL administration, over the batch coordinator.

The bindings live in the batch coordinator, so whichever broker is asked changes them for the
whole cluster. Creating and deleting need ALTER on the cluster, describing DESCRIBE on it
(CLUSTER_AUTHORIZATION_FAILED otherwise); without an authorizer each answers
SECURITY_DISABLED, as Kafka does. A change is loaded into this process's ACLs before it is
answered, so it applies at once to the next request here; other processes follow within
`acl_refresh_ms` (`_coordination.acl_cache`). A refusal, and a failure of the coordinator (the
library's `admin_error` code, answered by the route), answer every entry of the request alike
(`*_error_response`).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from typing import Final

from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import ResponsePayload

from diskless.coordinator import AclBinding, AclOperation, binding_from_codes, filter_from_codes
from diskless.kafka_server._coordination.acl_cache import AclCache
from diskless.kafka_server._handlers._access import ALTER, DESCRIBE, Access
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
    refused = _refusal(context, session, ALTER)
    if refused is not None:
        return create_acls_error_response(request, response, refused)
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
    outcomes = await _acls(context).create(bindings)
    return _encode_create_acls(response, [(wire(o.error), o.message) for o in outcomes])


def create_acls_error_response(
    request: CreateAclsRequest, response: Response, code: WireError
) -> ResponsePayload:
    return _encode_create_acls(response, [(code, _message(code))] * len(request.creations))


def _encode_create_acls(
    response: Response, results: Sequence[tuple[WireError, str | None]]
) -> ResponsePayload:
    result_entry = nested(response, "AclCreationResult")
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
    refused = _refusal(context, session, DESCRIBE)
    if refused is not None:
        return describe_acls_error_response(request, response, refused)
    acl_filter = filter_from_codes(
        request.resource_type_filter,
        request.resource_name_filter,
        request.pattern_type_filter,
        request.principal_filter,
        request.host_filter,
        request.operation,
        request.permission_type,
    )
    found = await _acls(context).describe(acl_filter)
    return _encode_describe_acls(response, WireError.none, found)


def describe_acls_error_response(
    request: DescribeAclsRequest, response: Response, code: WireError
) -> ResponsePayload:
    return _encode_describe_acls(response, code, [])


def _encode_describe_acls(
    response: Response, error: WireError, found: Sequence[AclBinding]
) -> ResponsePayload:
    resource_entry = nested(response, "DescribeAclsResource")
    acl_entry = nested(response, "AclDescription")
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
    refused = _refusal(context, session, ALTER)
    if refused is not None:
        return delete_acls_error_response(request, response, refused)
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
    deletions = await _acls(context).delete(filters)
    return _encode_delete_acls(response, [(wire(d.error), d.message, d.deleted) for d in deletions])


def delete_acls_error_response(
    request: DeleteAclsRequest, response: Response, code: WireError
) -> ResponsePayload:
    return _encode_delete_acls(response, [(code, _message(code), ())] * len(request.filters))


def _encode_delete_acls(
    response: Response, results: Sequence[tuple[WireError, str | None, Sequence[AclBinding]]]
) -> ResponsePayload:
    result_entry = nested(response, "DeleteAclsFilterResult")
    matching_entry = nested(response, "DeleteAclsMatchingAcl")
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
