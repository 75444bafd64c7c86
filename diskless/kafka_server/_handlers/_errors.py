"""A library call that raised, answered with the code the library's error table gives its API.

A protocol outcome arrives as an `ErrorCode` value and keeps its code (`_protocol.fields.wire`).
A library exception (`DisklessError`: storage, coordinator, a fenced or closed broker) is an
infrastructure fault: the client must see a retriable error and try again, never a silent loss
or a hung request. Which code is not decided here: each route (`table`), or the handler that
answers a failure entry by entry, names its API's family in the library's table
(`diskless._kafka_errors`: `produce_error`, `group_error`, ...), the same table the library
answers its own failed partitions from, so a failure gets the same code whichever layer meets
it. This module only logs the failure once and puts the code on the wire.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kio.schema.errors import ErrorCode as WireError

from diskless._availability import log_failure
from diskless._types import ErrorCode
from diskless.kafka_server._protocol.fields import wire

_log = logging.getLogger(__name__)

Family = Callable[[BaseException], ErrorCode]
"""An API family's entry in the library's error table."""


def failure(family: Family, error: Exception, what: str) -> WireError:
    """The code for the entries of a response that a library failure left unanswered.

    `what` says which call failed, for the log: the exception is logged here, once (at DEBUG
    when the coordinator or the store did not answer: their availability logs the outage).
    """
    return wire(failure_code(family, error, what))


def failure_code(family: Family, error: Exception, what: str) -> ErrorCode:
    """`failure`, as the library's code (for a handler that answers with library results)."""
    log_failure(_log, error, "%s failed", what)
    return family(error)
