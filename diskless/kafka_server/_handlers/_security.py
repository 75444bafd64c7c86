"""Security APIs that reach the handlers: SASL requests after authentication, and the SCRAM
credential administration (KIP-554).

A SASL listener authenticates a connection before any request reaches the handler table
(`_server.network._authenticator`, as Kafka's `SaslServerAuthenticator` runs before `KafkaApis`). So
SaslHandshake and SaslAuthenticate arrive here only on a connection that has authenticated
already, or on a listener without SASL; Kafka answers both with ILLEGAL_SASL_STATE (and the
same message for SaslAuthenticate either way).

DescribeUserScramCredentials and AlterUserScramCredentials answer per user with Kafka's codes
and messages (the rules are the coordinator's, `diskless.coordinator._rules.scram`). A failure
of the batch coordinator answers every user (Describe: the request) with the admin family's code
of the library's error table.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import ResponsePayload

from diskless._kafka_errors import admin_error
from diskless.coordinator import ScramDeletion, ScramUpsertion
from diskless.errors import DisklessError
from diskless.kafka_server._handlers._access import ALTER, DESCRIBE, Access
from diskless.kafka_server._handlers._errors import failure
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response
from diskless.kafka_server._handlers.context import BrokerContext, Session
from diskless.kafka_server._protocol.fields import build, nested, wire
from diskless.kafka_server._protocol.messages_security import (
    AlterUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)

UNAVAILABLE = "the batch coordinator is unavailable; try again"


async def handle_sasl_handshake(
    context: BrokerContext, session: Session, request: SaslHandshakeRequest, response: Response
) -> ResponsePayload:
    return build(response, error_code=WireError.illegal_sasl_state, mechanisms=())


async def handle_sasl_authenticate(
    context: BrokerContext, session: Session, request: SaslAuthenticateRequest, response: Response
) -> ResponsePayload:
    return build(
        response,
        error_code=WireError.illegal_sasl_state,
        error_message="SaslAuthenticate request received after successful authentication",
        auth_bytes=b"",
    )


async def handle_describe_user_scram_credentials(
    context: BrokerContext,
    session: Session,
    request: DescribeUserScramCredentialsRequest,
    response: Response,
) -> ResponsePayload:
    users = None if request.users is None else [u.name for u in request.users]
    if not Access(context, session).cluster(DESCRIBE):  # Kafka: DESCRIBE on the cluster
        return build(
            response,
            throttle_time=NO_THROTTLE,
            error_code=WireError.cluster_authorization_failed,
            error_message=None,
            results=(),
        )
    try:
        described = await context.credentials.describe(users)
    except DisklessError as e:
        return build(
            response,
            throttle_time=NO_THROTTLE,
            error_code=failure(admin_error, e, "describing SCRAM credentials"),
            error_message=UNAVAILABLE,
            results=(),
        )
    result = nested(response, "DescribeUserScramCredentialsResult")
    info = nested(response, "CredentialInfo")
    return build(
        response,
        throttle_time=NO_THROTTLE,
        error_code=WireError.none,
        error_message=None,
        results=tuple(
            build(
                result,
                user=d.user,
                error_code=wire(d.error),
                error_message=d.message,
                credential_infos=tuple(
                    build(info, mechanism=mechanism, iterations=iterations)
                    for mechanism, iterations in d.credentials
                ),
            )
            for d in described
        ),
    )


async def handle_alter_user_scram_credentials(
    context: BrokerContext,
    session: Session,
    request: AlterUserScramCredentialsRequest,
    response: Response,
) -> ResponsePayload:
    deletions = [ScramDeletion(d.name, int(d.mechanism)) for d in request.deletions]
    upsertions = [
        ScramUpsertion(u.name, int(u.mechanism), int(u.iterations), u.salt, u.salted_password)
        for u in request.upsertions
    ]
    result = nested(response, "AlterUserScramCredentialsResult")
    if not Access(context, session).cluster(ALTER):  # Kafka: ALTER on the cluster, every user
        users = dict.fromkeys([*(d.user for d in deletions), *(u.user for u in upsertions)])
        return build(
            response,
            throttle_time=NO_THROTTLE,
            results=tuple(
                build(
                    result,
                    user=user,
                    error_code=WireError.cluster_authorization_failed,
                    error_message=None,
                )
                for user in users
            ),
        )
    try:
        altered = [
            (r.user, wire(r.error), r.message)
            for r in await context.credentials.alter(deletions, upsertions)
        ]
    except DisklessError as e:
        code = failure(admin_error, e, "altering SCRAM credentials")
        users = dict.fromkeys([*(d.user for d in deletions), *(u.user for u in upsertions)])
        altered = [(user, code, UNAVAILABLE) for user in users]
    return build(
        response,
        throttle_time=NO_THROTTLE,
        results=tuple(
            build(result, user=user, error_code=code, error_message=message)
            for user, code, message in altered
        ),
    )
