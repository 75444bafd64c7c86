"""The share fault oracle's model (`test_share_faults.py`): what the broker processes' journals
say happened to each record, and KIP-932's rules checked against it.

The model knows a step only by the interval [sent, answered] it ran in, on the coordinator's
clock, and an unanswered step (its process killed, or the coordinator failing) as one that may
or may not have run. So each check asks whether some order of the steps within their intervals
obeys the rules: it never reports a violation that is not one, and the shorter the steps'
intervals against the lock duration, the fewer it can miss.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from diskless._types import ErrorCode, TopicPartition
from diskless.coordinator import AcknowledgeType, RecordState

from ._share_child import LIMITS, PARTITIONS, TOPIC, now_ms

LOCK_MS: Final = LIMITS.lock_duration_ms
LIMIT: Final = LIMITS.delivery_count_limit
TERMINAL: Final = {
    int(AcknowledgeType.ACCEPT),
    int(AcknowledgeType.REJECT),
    int(AcknowledgeType.GAP),
}


@dataclass(frozen=True)
class Step:
    member: str
    t0: int
    t1: int | None
    """None: never answered (its process was killed) or failed: it may or may not have run."""


@dataclass(frozen=True)
class Acquisition:
    step: Step
    count: int
    read_at: int
    """When the broker began reading the log start it acquired at."""


@dataclass(frozen=True)
class Ack:
    step: Step
    kind: int
    code: int | None
    """The partition's answer (None: unknown)."""

    @property
    def maybe_applied(self) -> bool:
        return self.code in (None, int(ErrorCode.NONE))


@dataclass
class History:
    """Everything the journals say happened to each record, and the members' departures."""

    acquired: dict[tuple[int, int], list[Acquisition]] = field(
        default_factory=lambda: defaultdict(list)
    )
    acks: dict[tuple[int, int], list[Ack]] = field(default_factory=lambda: defaultdict(list))
    left: list[Step] = field(default_factory=list)
    deleted: list[tuple[int, int | None, int, int]] = field(default_factory=list)
    """DeleteRecords sent (and perhaps applied): (sent, answered NONE or None, partition,
    offset)."""
    killed_members: set[str] = field(default_factory=set)
    answered: int = 0
    unknown: int = 0

    def add(self, started: dict[str, Any], ended: dict[str, Any] | None) -> None:
        t1 = ended["t1"] if ended is not None and "a" in ended else None
        step = Step(started["m"], started["t0"], t1)
        answer = ended.get("a") if t1 is not None and ended is not None else None
        if t1 is None:
            self.unknown += 1
        else:
            self.answered += 1
        if started["k"] == "acq":
            for partition, ranges in (answer or {}).items():
                for first, last, count in ranges:
                    for o in range(first, last + 1):
                        self.acquired[(int(partition), o)].append(
                            Acquisition(step, count, started.get("r", step.t0))
                        )
        elif started["k"] == "ack":
            for partition, pairs in started["p"].items():
                code = None if answer is None else answer[partition]
                for o, kind in pairs:
                    self.acks[(int(partition), o)].append(Ack(step, kind, code))
        else:
            self.left.append(step)

    def read(self, journal: Path, killed: bool) -> None:
        started: dict[int, dict[str, Any]] = {}
        ended: dict[int, dict[str, Any]] = {}
        for line in journal.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:  # torn by the SIGKILL: the last line only
                continue
            (ended if "t1" in entry else started)[entry["i"]] = entry
        for n, entry in started.items():
            self.add(entry, ended.get(n))
            if killed:
                self.killed_members.add(entry["m"])


def _before(a: Step, b: Step) -> bool:
    """Whether a's step may have run before b's (b answered)."""
    assert b.t1 is not None
    return a.t0 <= b.t1


def _released_between(
    history: History, member: str | None, key: tuple[int, int], a: Step, b: Step
) -> bool:
    """Whether `member` (None: anyone) may have given the record back (RELEASE, or leaving)
    after acquiring it in `a` and before `b`'s step."""
    assert a.t1 is not None and b.t1 is not None
    for left in history.left:
        if (member is None or left.member == member) and a.t0 <= left.t0 <= b.t1:
            return True
    if member is None:
        return False
    return any(
        ack.step.member == member
        and ack.kind == AcknowledgeType.RELEASE
        and ack.maybe_applied
        and a.t1 <= ack.step.t0 <= b.t1
        for ack in history.acks[key]
    )


def _explained(history: History, key: tuple[int, int], a: Acquisition, b: Acquisition) -> bool:
    """Whether `a` may have come before `b` with KIP-932's rules: its holder lost the record
    before b's step, and the delivery count went from a's to b's."""
    if not _before(a.step, b.step):
        return False
    assert b.step.t1 is not None
    if b.count < a.count:
        return False
    if b.count == a.count and not _released_between(history, None, key, a.step, b.step):
        return False  # only a member leaving gives a delivery back
    expired = b.step.t1 - a.step.t0 >= LOCK_MS
    return expired or _released_between(history, a.step.member, key, a.step, b.step)


def _deleted_by(history: History, key: tuple[int, int], t: int) -> bool:
    """Whether the record may have been deleted (DeleteRecords) by `t`."""
    partition, offset = key
    return any(p == partition and o > offset and t0 <= t for t0, _, p, o in history.deleted)


def _held_at(history: History, key: tuple[int, int], b: Acquisition, k: Ack) -> bool:
    """Whether b's holder surely held the record at k's step: b was answered before k was
    sent, and neither its lock, nor anything its holder sent, nor a deletion may have ended it
    by then."""
    assert b.step.t1 is not None and k.step.t1 is not None
    if b.step.t1 > k.step.t0 or k.step.t1 - b.step.t0 >= LOCK_MS:
        return False
    if _deleted_by(history, key, k.step.t1):
        return False
    if _released_between(history, b.step.member, key, b.step, k.step):
        return False
    return not any(
        ack.step.member == b.step.member
        and ack.kind in TERMINAL
        and ack.maybe_applied
        and b.step.t1 <= ack.step.t0 <= k.step.t1
        for ack in history.acks[key]
    )


def _finished_by(
    history: History, key: tuple[int, int], t: int, other_than: Ack | None = None
) -> bool:
    """Whether the record may have been finished (acknowledged, rejected, archived at the
    delivery limit, or deleted) by a step that began by `t` (`other_than` aside)."""
    if _deleted_by(history, key, t):
        return True
    if any(
        k.kind in TERMINAL and k.maybe_applied and k.step.t0 <= t and k is not other_than
        for k in history.acks[key]
    ):
        return True
    return any(a.count >= LIMIT and a.step.t0 <= t for a in history.acquired[key])


def check(
    history: History, states: dict[TopicPartition, Any], states_at: int, records: int
) -> dict[str, int]:
    """Every violation of the model, as one assertion listing them; some figures of the run.
    `states`: the share-partitions as read at `states_at`, before the drain."""
    violations: list[str] = []
    redelivered_after_kill = 0
    for key, acquisitions in history.acquired.items():
        for a in acquisitions:
            if not 1 <= a.count <= LIMIT:
                violations.append(f"{key}: delivery count {a.count} by {a.step}")
            for _, t1, p, o in history.deleted:
                if t1 is not None and p == key[0] and o > key[1] and a.read_at >= t1:
                    violations.append(f"{key}: delivered after its deletion at {t1}: {a}")
        for i, a in enumerate(acquisitions):
            for b in acquisitions[i + 1 :]:
                if not (_explained(history, key, a, b) or _explained(history, key, b, a)):
                    violations.append(f"{key}: held by two at once: {a} and {b}")
        for a in acquisitions:
            if a.step.member in history.killed_members and any(
                b.count > a.count and b.step.member not in history.killed_members
                for b in acquisitions
            ):
                redelivered_after_kill += 1
    for key, acks in history.acks.items():
        answered = [k for k in acks if k.code == ErrorCode.NONE]
        for k in answered:
            assert k.step.t1 is not None
            held = any(
                a.step.member == k.step.member
                and a.step.t1 is not None
                and a.step.t1 <= k.step.t0 < a.step.t1 + LOCK_MS
                for a in history.acquired[key]
            )
            if not held and not _finished_by(history, key, k.step.t1, other_than=k):
                violations.append(f"{key}: acknowledged NONE without holding it: {k}")
            for b in history.acquired[key]:
                if b.step.member != k.step.member and _held_at(history, key, b, k):
                    violations.append(f"{key}: acknowledged NONE while another held it: {k}, {b}")
            if k.kind in TERMINAL:
                for b in history.acquired[key]:
                    if b.step.t0 >= k.step.t1:
                        violations.append(f"{key}: acquired again after {k}: {b}")
    for (partition, offset), acks in history.acks.items():
        done = [
            k
            for k in acks
            if k.code == ErrorCode.NONE
            and k.kind in TERMINAL
            and k.step.t1 is not None
            and k.step.t1 <= states_at
        ]
        if not done:
            continue
        state = states.get(TopicPartition(TOPIC, partition))
        if state is None or offset < state.start:
            continue
        found = [r for r in state.ranges if r.first <= offset <= r.last]
        if len(found) != 1:
            violations.append(f"{(partition, offset)}: not in the state after {done}")
            continue
        held = found[0]
        maybe = [k for k in acks if k.kind in TERMINAL and k.maybe_applied]
        expected = {
            RecordState.ACKNOWLEDGED if k.kind == AcknowledgeType.ACCEPT else RecordState.ARCHIVED
            for k in maybe
        }
        if held.state not in expected:
            violations.append(f"{(partition, offset)}: {held} after {done}")
    for partition in range(PARTITIONS):
        for offset in range(records):
            key = (partition, offset)
            if not _finished_by(history, key, now_ms()):
                violations.append(
                    f"{key}: finished without an acknowledgement, the limit or a deletion"
                )
    assert not violations, "\n".join(violations[:30])
    return {
        "answered": history.answered,
        "unknown": history.unknown,
        "acquisitions": sum(len(a) for a in history.acquired.values()),
        "redelivered_after_kill": redelivered_after_kill,
    }
