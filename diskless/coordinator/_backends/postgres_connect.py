"""What opening the PostgreSQL coordinator failed on, in kinds an operator can act on.

Opening (the pool's first connection and the schema's migration) meets the failures of a
configuration: a wrong password, a role without a privilege, a certificate that does not verify,
a server that does not answer. asyncpg raises each as its own exception, and letting them reach
the caller as "unavailable" would send an operator looking for a network fault. `opening_error`
names each for what it is (`diskless.errors`); anything else, a server that is down included,
stays the retriable `CoordinatorUnavailableError`.
"""

from __future__ import annotations

import ssl
from typing import Final

import asyncpg

from diskless.errors import (
    CoordinatorAuthenticationError,
    CoordinatorPrivilegeError,
    CoordinatorTimeoutError,
    CoordinatorTlsError,
    CoordinatorUnavailableError,
)

AUTHENTICATION_SQLSTATES: Final = frozenset({"28P01", "28000"})
"""invalid_password, invalid_authorization_specification (no such role, no pg_hba rule)."""
PRIVILEGE_SQLSTATES: Final = frozenset({"42501"})
"""insufficient_privilege."""
_TLS_REFUSED: Final = "rejected SSL upgrade"
"""asyncpg's ConnectionError when the connection requires TLS and the server has none."""


def opening_error(error: BaseException, timeout_s: float) -> CoordinatorUnavailableError:
    """The library's error for `error`, raised while connecting or migrating the schema."""
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, asyncpg.PostgresError):
        state = error.sqlstate
        if state in AUTHENTICATION_SQLSTATES:
            return CoordinatorAuthenticationError(f"authentication failed: {text}")
        if state in PRIVILEGE_SQLSTATES:
            return CoordinatorPrivilegeError(f"missing privilege: {text}")
        return CoordinatorUnavailableError(f"postgres: {type(error).__name__}: {text}")
    if isinstance(error, ssl.SSLError):
        return CoordinatorTlsError(f"TLS failure: {text}")
    if isinstance(error, ConnectionError) and _TLS_REFUSED in text:
        return CoordinatorTlsError(f"TLS failure: the server {text}")
    if isinstance(error, TimeoutError):
        return CoordinatorTimeoutError(f"no answer within {timeout_s:g} s")
    return CoordinatorUnavailableError(f"postgres: {type(error).__name__}: {text}")
