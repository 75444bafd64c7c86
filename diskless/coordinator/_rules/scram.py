"""The rules of SCRAM credentials (KIP-554), as Kafka's controller applies them.

AlterUserScramCredentials: each user may appear once in a request, deletions and upsertions
together (a second appearance fails the user with DUPLICATE_RESOURCE, and nothing of that user
changes); a user name must not be empty; the mechanism must be a SCRAM one; an upsertion's
iterations lie in [ITERATIONS_MIN, ITERATIONS_MAX]; a deletion names a stored credential.
The other users of the request are altered together in one step. The answers list successful
deletions, then successful upsertions, then failures, as Kafka's do.

DescribeUserScramCredentials: every user holding a credential when none is named; a user named
twice is DUPLICATE_RESOURCE; a user without any credential is RESOURCE_NOT_FOUND.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from diskless._scram import (
    ITERATIONS_MAX,
    ITERATIONS_MIN,
    ScramCredential,
    ScramMechanism,
    credential,
)
from diskless._types import ErrorCode
from diskless.coordinator._values import (
    ScramDeletion,
    ScramDescription,
    ScramResult,
    ScramUpsertion,
)

CredentialKey = tuple[str, ScramMechanism]
"""(user, mechanism): a stored credential's key."""


class ScramSnapshot(NamedTuple):
    """Every stored credential, with the security version they are (the counter every ACL and
    every SCRAM credential change increments, `_rules.acls.ACL_VERSION_COUNTER`), from one
    consistent read: what a broker authenticates against while the coordinator is away."""

    version: int
    credentials: Mapping[CredentialKey, ScramCredential]


DUPLICATE = "A user credential cannot be altered twice in the same request"
DESCRIBE_DUPLICATE = (
    "Cannot describe SCRAM credentials for the same user twice in a single request: "
)
DESCRIBE_UNKNOWN = "Attempt to describe a user credential that does not exist: "


def _check_user_and_mechanism(user: str, number: int) -> ScramResult | None:
    if not user:
        return ScramResult(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if ScramMechanism.of_type(number) is None:
        return ScramResult(user, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    return None


def _check_deletion(
    deletion: ScramDeletion, stored: Mapping[CredentialKey, ScramCredential]
) -> ScramResult | None:
    refused = _check_user_and_mechanism(deletion.user, deletion.mechanism)
    if refused is not None:
        return refused
    if (deletion.user, ScramMechanism(deletion.mechanism)) not in stored:
        return ScramResult(
            deletion.user,
            ErrorCode.RESOURCE_NOT_FOUND,
            "Attempt to delete a user credential that does not exist",
        )
    return None


def _check_upsertion(upsertion: ScramUpsertion) -> ScramResult | None:
    refused = _check_user_and_mechanism(upsertion.user, upsertion.mechanism)
    if refused is not None:
        return refused
    if upsertion.iterations < ITERATIONS_MIN:
        return ScramResult(upsertion.user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    if upsertion.iterations > ITERATIONS_MAX:
        return ScramResult(upsertion.user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    return None


def plan_alterations(
    deletions: Sequence[ScramDeletion],
    upsertions: Sequence[ScramUpsertion],
    stored: Mapping[CredentialKey, ScramCredential],
) -> tuple[list[ScramResult], dict[CredentialKey, ScramCredential | None]]:
    """The answer per user, and the credentials to store (None: delete), given the credentials
    `stored` for the users of the request."""
    failed: dict[str, ScramResult] = {}
    deleting: dict[str, ScramDeletion] = {}
    upserting: dict[str, ScramUpsertion] = {}
    for deletion in deletions:
        user = deletion.user
        if user in failed:
            continue
        if deleting.pop(user, None) is not None:
            failed[user] = ScramResult(user, ErrorCode.DUPLICATE_RESOURCE, DUPLICATE)
        elif (refused := _check_deletion(deletion, stored)) is not None:
            failed[user] = refused
        else:
            deleting[user] = deletion
    for upsertion in upsertions:
        user = upsertion.user
        if user in failed:
            continue
        if deleting.pop(user, None) is not None or upserting.pop(user, None) is not None:
            failed[user] = ScramResult(user, ErrorCode.DUPLICATE_RESOURCE, DUPLICATE)
        elif (refused := _check_upsertion(upsertion)) is not None:
            failed[user] = refused
        else:
            upserting[user] = upsertion
    changes: dict[CredentialKey, ScramCredential | None] = {}
    for user, deletion in deleting.items():
        changes[(user, ScramMechanism(deletion.mechanism))] = None
    for user, upsertion in upserting.items():
        mechanism = ScramMechanism(upsertion.mechanism)
        changes[(user, mechanism)] = credential(
            mechanism, upsertion.salted_password, upsertion.salt, upsertion.iterations
        )
    results = [ScramResult(user, ErrorCode.NONE) for user in (*deleting, *upserting)]
    return [*results, *failed.values()], changes


def describe(
    users: Sequence[str] | None, stored: Mapping[CredentialKey, ScramCredential]
) -> list[ScramDescription]:
    """The answer to DescribeUserScramCredentials for `users` (None or empty: every user with a
    credential, by name), given the credentials `stored` for them."""
    by_user: dict[str, list[tuple[int, int]]] = {}
    for (user, mechanism), stored_credential in sorted(stored.items()):
        by_user.setdefault(user, []).append((int(mechanism), stored_credential.iterations))
    if not users:
        return [ScramDescription(u, ErrorCode.NONE, None, c) for u, c in sorted(by_user.items())]
    seen: dict[str, int] = {}
    for user in users:
        seen[user] = seen.get(user, 0) + 1
    answers = []
    for user, times in seen.items():
        if times > 1:
            answers.append(
                ScramDescription(user, ErrorCode.DUPLICATE_RESOURCE, DESCRIBE_DUPLICATE + user, [])
            )
        elif user not in by_user:
            answers.append(
                ScramDescription(user, ErrorCode.RESOURCE_NOT_FOUND, DESCRIBE_UNKNOWN + user, [])
            )
        else:
            answers.append(ScramDescription(user, ErrorCode.NONE, None, by_user[user]))
    return answers
