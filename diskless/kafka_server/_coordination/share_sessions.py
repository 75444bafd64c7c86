"""Share sessions (KIP-932), as Kafka's `ShareSessionCache` keeps them: per broker, group and
member, the partitions a share consumer fetches and the epoch its next request must carry.

A ShareFetch names only what changed since its previous request (partitions added, forgotten
topics removed); the session holds the rest, so every fetch reads all of the session's
partitions. Epoch 0 opens a session (replacing the member's previous one on this broker; what
the member holds stays its own, as in Kafka: a client that starts its session over, after a
reassignment or an error, still acknowledges the records it delivered), -1 closes it (its
member's records in its partitions released), anything else must be the
session's current epoch, which each request moves on: a lost or replayed request is refused
(INVALID_SHARE_SESSION_EPOCH), an unknown session answered SHARE_SESSION_NOT_FOUND. As in Kafka
4.1, sessions are not evicted by age: a full cache refuses a new one
(SHARE_SESSION_LIMIT_REACHED), and a session ends when its member closes it, when its member
opens another, when its member leaves its group, or when the connection it was opened on
closes.

Only this broker's view: the records a session's member holds are the coordinator's
(`BatchCoordinator.share_steps`), so a session lost with its process loses no record; its locks
run out by the coordinator's clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Final, NamedTuple

from diskless._types import ErrorCode

INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
EPOCH_MAX: Final = (1 << 31) - 1
SHARE_SESSIONS_MAX_DEFAULT: Final = 2000
"""Kafka's `group.share.max.share.sessions`."""

TopicIdPartition = tuple[uuid.UUID, int]
"""A partition as share requests name it: its topic's id and its index."""


class ShareSessionKey(NamedTuple):
    broker_id: int
    group_id: str
    member_id: str


class ShareSession:
    """One member's session with one broker."""

    __slots__ = ("connection", "epoch", "key", "partitions")

    def __init__(self, key: ShareSessionKey, connection: object) -> None:
        self.key = key
        self.connection = connection
        """The connection it was opened on (it ends with it)."""
        self.epoch = 1
        """The epoch the next request must carry."""
        self.partitions: dict[TopicIdPartition, None] = {}
        """The partitions it fetches, in the order they were added."""

    def update(
        self, added: Iterable[TopicIdPartition], forgotten: Iterable[TopicIdPartition]
    ) -> None:
        for tp in forgotten:
            self.partitions.pop(tp, None)
        for tp in added:
            self.partitions.setdefault(tp, None)


class SessionStep(NamedTuple):
    """What a request's epoch did to its session."""

    error: ErrorCode
    session: ShareSession | None = None
    """The session the request runs in (None on an error)."""
    ended: ShareSession | None = None
    """A session that ended: closed by epoch -1 (its member's records in its partitions are to
    be released), or replaced by epoch 0 (they are not)."""


class ShareSessions:
    """The share sessions of one process's brokers (see the module doc)."""

    def __init__(self, sessions_max: int = SHARE_SESSIONS_MAX_DEFAULT) -> None:
        if sessions_max < 1:
            raise ValueError("sessions_max must be >= 1")
        self._sessions_max = sessions_max
        self._sessions: dict[ShareSessionKey, ShareSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, key: ShareSessionKey) -> ShareSession | None:
        return self._sessions.get(key)

    def fetch(
        self,
        key: ShareSessionKey,
        epoch: int,
        connection: object,
        added: Iterable[TopicIdPartition],
        forgotten: Iterable[TopicIdPartition],
    ) -> SessionStep:
        """A ShareFetch's session: opened (0), closed (-1, with its partitions as they were),
        or moved on to its next epoch with the partitions added and forgotten."""
        if epoch == INITIAL_EPOCH:
            ended = self._sessions.pop(key, None)
            if len(self._sessions) >= self._sessions_max:
                if ended is not None:
                    self._sessions[key] = ended
                return SessionStep(ErrorCode.SHARE_SESSION_LIMIT_REACHED)
            session = self._sessions[key] = ShareSession(key, connection)
            session.update(added, forgotten)
            return SessionStep(ErrorCode.NONE, session, ended)
        return self._next(key, epoch, connection, added, forgotten)

    def acknowledge(self, key: ShareSessionKey, epoch: int, connection: object) -> SessionStep:
        """A ShareAcknowledge's session: it never opens one (epoch 0 is
        INVALID_SHARE_SESSION_EPOCH); -1 closes it, anything else moves it on."""
        if epoch == INITIAL_EPOCH:
            return SessionStep(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        return self._next(key, epoch, connection, (), ())

    def _next(
        self,
        key: ShareSessionKey,
        epoch: int,
        connection: object,
        added: Iterable[TopicIdPartition],
        forgotten: Iterable[TopicIdPartition],
    ) -> SessionStep:
        session = self._sessions.get(key)
        if session is None:
            return SessionStep(ErrorCode.SHARE_SESSION_NOT_FOUND)
        if epoch == FINAL_EPOCH:
            del self._sessions[key]
            return SessionStep(ErrorCode.NONE, session, session)
        if epoch != session.epoch:
            return SessionStep(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        session.epoch = 1 if session.epoch == EPOCH_MAX else session.epoch + 1
        session.connection = connection
        session.update(added, forgotten)
        return SessionStep(ErrorCode.NONE, session)

    def member_left(self, group_id: str, member_id: str) -> list[ShareSession]:
        """The sessions of a member that left its group, removed."""
        ended = [
            s
            for s in self._sessions.values()
            if s.key.group_id == group_id and s.key.member_id == member_id
        ]
        for session in ended:
            del self._sessions[session.key]
        return ended

    def disconnected(self, connection: object) -> list[ShareSession]:
        """The sessions opened on a connection that closed, removed."""
        ended = [s for s in self._sessions.values() if s.connection is connection]
        for session in ended:
            del self._sessions[session.key]
        return ended
