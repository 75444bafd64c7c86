"""Unit: a group's state machine (`GroupState`) returns its decisions and does none of them.

Each step is called as a plain function, with no event loop: what it answers the request, the
waiting requests of other members it answers, the rebalance timer it arms or cancels, and the
generation it finds due to be stored are all in the `Step` it returns. A generation is handed
out only once its owner says it is stored.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode as WireError

from diskless.kafka_server._coordination.group_state import (
    INITIAL_REBALANCE_DELAY_MS,
    GroupPhase,
    GroupState,
    JoinOutcome,
    Step,
    SyncOutcome,
    Wait,
)

RANGE = [("range", b"m")]


def _join(
    state: GroupState,
    member_id: str,
    *,
    fresh: bool = False,
    instance_id: str | None = None,
    protocols: list[tuple[str, bytes]] = RANGE,
    rebalance_timeout_ms: int = 10_000,
    now: float = 0.0,
) -> Step[JoinOutcome | Wait]:
    """`member_id` joins; with `fresh`, it joins without an id and is given `member_id`."""
    return state.join(
        member_id="" if fresh else member_id,
        instance_id=instance_id,
        protocol_type="consumer",
        protocols=protocols,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=rebalance_timeout_ms,
        fresh_member_id=member_id if fresh else "",
        require_known_member_id=False,
        now=now,
    )


def _complete(state: GroupState) -> Step[None]:
    """The rebalance timer runs out and the generation it finds due is stored."""
    due = state.rebalance_due()
    assert due.store_generation == state.generation + 1
    return state.generation_stored(due.store_generation)


def _follower_waits_to_sync() -> GroupState:
    """m1 (the leader) and m2 join, generation 1 is handed out, and m2 waits for the leader's
    SyncGroup."""
    state = GroupState("g", 0)
    _join(state, "m1", fresh=True)
    _join(state, "m2", fresh=True)
    _complete(state)
    assert state.sync(1, "m2", None, {}, now=0.0) == Step(Wait("m2"))
    return state


def _stable(state: GroupState, *members: str) -> None:
    """`members` join (the first leads) and sync: a stable generation."""
    for member in members:
        _join(state, member, fresh=True)
    _complete(state)
    leader, *followers = members
    for follower in followers:
        assert state.sync(state.generation, follower, None, {}, now=0.0).response == Wait(follower)
    state.sync(state.generation, leader, None, {}, now=0.0)
    assert state.phase is GroupPhase.STABLE


def test_a_generation_is_due_then_handed_out_only_once_stored() -> None:
    state = GroupState("g", 0)
    first = _join(state, "m1", fresh=True)
    # It waits; the group's first rebalance gives others a moment to join.
    assert first == Step(Wait("m1"), arm_ms=INITIAL_REBALANCE_DELAY_MS)
    assert state.phase is GroupPhase.PREPARING

    assert state.rebalance_due() == Step(None, store_generation=1)
    assert state.generation == 0 and state.completing
    assert state.rebalance_due() == Step(None), "one generation is stored at a time"

    stored = state.generation_stored(1)
    assert stored == Step(
        None, joins=(JoinOutcome(WireError.none, 1, "range", "m1", "m1", [("m1", None, b"m")]),)
    )
    assert (state.generation, state.phase, state.completing) == (1, GroupPhase.COMPLETING, False)


def test_a_generation_not_stored_answers_the_waiting_joins_and_the_rebalance_stays() -> None:
    state = GroupState("g", 5)
    assert _join(state, "m1", fresh=True) == Step(Wait("m1"), arm_ms=0)
    assert state.rebalance_due().store_generation == 6

    failed = state.generation_not_stored(WireError.coordinator_not_available)
    assert failed == Step(
        None, joins=(JoinOutcome(WireError.coordinator_not_available, member_id="m1"),)
    )
    assert (state.generation, state.phase, state.completing) == (5, GroupPhase.PREPARING, False)
    # The member joins again; the same generation is due.
    assert _join(state, "m1") == Step(Wait("m1"), arm_ms=0)
    assert state.rebalance_due().store_generation == 6


def test_a_member_that_does_not_rejoin_is_dropped_when_the_rebalance_is_due() -> None:
    state = GroupState("g", 0)
    _stable(state, "m1", "m2")
    # A new member prepares a rebalance: the timer runs the longest rebalance timeout.
    assert _join(state, "m3", fresh=True, rebalance_timeout_ms=30_000) == Step(
        Wait("m3"), arm_ms=30_000
    )
    assert state.heartbeat(1, "m2", None, now=1.0) == WireError.rebalance_in_progress
    # m1 rejoins; m2 has not, so the timer armed before keeps running.
    assert _join(state, "m1") == Step(Wait("m1"))

    assert state.rebalance_due() == Step(None, store_generation=2)
    assert set(state.members) == {"m1", "m3"}
    stored = state.generation_stored(2)
    listing = [("m1", None, b"m"), ("m3", None, b"m")]
    assert stored.joins == (
        JoinOutcome(WireError.none, 2, "range", "m1", "m1", listing),
        JoinOutcome(WireError.none, 2, "range", "m1", "m3", []),
    )


def test_a_join_again_answers_the_join_it_takes_the_place_of() -> None:
    state = GroupState("g", 0)
    _join(state, "m1", fresh=True)
    again = _join(state, "m1")
    assert again.response == Wait("m1")
    assert again.joins == (JoinOutcome(WireError.rebalance_in_progress, member_id="m1"),)


def test_the_leaders_sync_answers_the_waiting_followers() -> None:
    state = _follower_waits_to_sync()
    assignments = {"m1": b"a", "m2": b"b"}
    leader = state.sync(1, "m1", None, assignments, now=0.0)
    assert leader == Step(
        SyncOutcome(WireError.none, b"a"), syncs=(("m2", SyncOutcome(WireError.none, b"b")),)
    )
    assert state.phase is GroupPhase.STABLE
    assert state.sync(1, "m2", None, {}, now=0.0) == Step(SyncOutcome(WireError.none, b"b"))


def test_a_join_while_followers_wait_to_sync_answers_them_rebalance_in_progress() -> None:
    state = _follower_waits_to_sync()
    joined = _join(state, "m3", fresh=True)
    assert joined == Step(
        Wait("m3"),
        syncs=(("m2", SyncOutcome(WireError.rebalance_in_progress)),),
        arm_ms=10_000,
    )


def test_a_replaced_static_member_is_answered_fenced() -> None:
    state = GroupState("g", 0)
    _join(state, "m1", fresh=True, instance_id="i")
    replacing = _join(state, "m2", fresh=True, instance_id="i")
    assert replacing.response == Wait("m2")
    assert replacing.joins == (JoinOutcome(WireError.fenced_instance_id, member_id="m1"),)
    assert state.heartbeat(0, "m1", "i", now=0.0) == WireError.fenced_instance_id
    assert state.leave("m1", "i") == Step(WireError.fenced_instance_id)


def _static_stable() -> GroupState:
    """Static members m1 (instance i1, the leader, assigned b"a") and m2 (i2, b"b") in a
    stable generation 1; m2 offers two protocols."""
    state = GroupState("g", 0)
    _join(state, "m1", fresh=True, instance_id="i1", protocols=[("range", b"m1")])
    _join(state, "m2", fresh=True, instance_id="i2", protocols=[*RANGE, ("roundrobin", b"")])
    _complete(state)
    assert state.sync(1, "m2", "i2", {}, now=0.0).response == Wait("m2")
    state.sync(1, "m1", "i1", {"m1": b"a", "m2": b"b"}, now=0.0)
    assert state.phase is GroupPhase.STABLE
    return state


def test_a_restarted_static_member_gets_its_assignment_back_without_a_rebalance() -> None:
    state = _static_stable()
    # m2 restarts: it joins without its member id, under a new one, with new metadata.
    rejoined = _join(state, "m3", fresh=True, instance_id="i2", protocols=[("range", b"new")])
    assert rejoined == Step(JoinOutcome(WireError.none, 1, "range", "m1", "m3", []))
    assert state.phase is GroupPhase.STABLE and state.generation == 1
    assert state.instances == {"i1": "m1", "i2": "m3"} and set(state.members) == {"m1", "m3"}
    assert state.sync(1, "m3", "i2", {}, now=1.0) == Step(SyncOutcome(WireError.none, b"b"))
    # The other member sees no rebalance; the old id is fenced.
    assert state.heartbeat(1, "m1", "i1", now=1.0) == WireError.none
    assert state.heartbeat(1, "m3", "i2", now=1.0) == WireError.none
    assert state.heartbeat(1, "m2", "i2", now=1.0) == WireError.fenced_instance_id
    assert state.sync(1, "m2", "i2", {}, now=1.0) == Step(SyncOutcome(WireError.fenced_instance_id))
    assert state.check_member(1, "m2", "i2", now=1.0) == WireError.fenced_instance_id
    assert state.check_member(1, "m3", "i2", now=1.0) == WireError.none
    assert state.leave("m2", "i2") == Step(WireError.fenced_instance_id)
    # Its metadata is the new one, as the next rebalance's leader reads it.
    assert state.members["m3"].protocols == [("range", b"new")]


def test_a_restarted_static_leader_is_answered_as_a_follower_and_leads_the_next_rebalance() -> None:
    state = _static_stable()
    rejoined = _join(state, "m3", fresh=True, instance_id="i1", protocols=[("range", b"m1")])
    # The answer names the leader as it was: the rejoined member does not assign anew.
    assert rejoined == Step(JoinOutcome(WireError.none, 1, "range", "m1", "m3", []))
    assert state.leader == "m3" and state.phase is GroupPhase.STABLE
    assert state.sync(1, "m3", "i1", {"m3": b"x"}, now=0.0) == Step(
        SyncOutcome(WireError.none, b"a")
    )
    assert state.members["m2"].assignment == b"b", "a stable group keeps its assignment"
    # The next rebalance hands the member list to it.
    _join(state, "m3", instance_id="i1", protocols=[("range", b"m1")])
    _join(state, "m2", instance_id="i2")
    stored = _complete(state)
    assert [(o.member_id, o.leader, len(o.members)) for o in stored.joins] == [
        ("m2", "m3", 0),
        ("m3", "m3", 2),
    ]


def test_a_static_member_whose_rejoin_changes_the_chosen_protocol_rebalances_the_group() -> None:
    state = _static_stable()
    # m1 leads and offers only range: m2 offering roundrobin alone leaves no protocol common.
    rejoined = _join(state, "m3", fresh=True, instance_id="i2", protocols=[("roundrobin", b"")])
    assert rejoined == Step(Wait("m3"), arm_ms=10_000)
    assert state.phase is GroupPhase.PREPARING
    assert state.heartbeat(1, "m1", "i1", now=0.0) == WireError.rebalance_in_progress


def test_a_static_member_rejoining_while_its_generation_is_handed_out_rebalances() -> None:
    state = _follower_waits_to_sync()
    _join(state, "s1", fresh=True, instance_id="i")  # joins the next rebalance
    _join(state, "m1")
    _join(state, "m2")
    _complete(state)
    assert state.phase is GroupPhase.COMPLETING and state.generation == 2
    assert state.sync(2, "m2", None, {}, now=0.0).response == Wait("m2")
    # The leader may be assigning to s1 now: its replacement rebalances the group.
    rejoined = _join(state, "s2", fresh=True, instance_id="i")
    assert rejoined == Step(
        Wait("s2"), syncs=(("m2", SyncOutcome(WireError.rebalance_in_progress)),), arm_ms=10_000
    )
    assert state.phase is GroupPhase.PREPARING and state.instances == {"i": "s2"}


def test_a_static_member_replaced_while_it_waits_to_join_is_answered_fenced() -> None:
    state = _static_stable()
    _join(state, "m1", instance_id="i1")  # the leader rejoins: a rebalance
    assert _join(state, "m2", instance_id="i2").response == Wait("m2")
    replaced = _join(state, "m3", fresh=True, instance_id="i2")
    assert replaced == Step(
        Wait("m3"),
        joins=(JoinOutcome(WireError.fenced_instance_id, member_id="m2"),),
        arm_ms=0,
    )
    stored = _complete(state)
    assert {o.member_id for o in stored.joins} == {"m1", "m3"}


def test_a_static_member_stays_until_its_session_times_out_then_the_group_rebalances() -> None:
    state = _static_stable()
    assert state.heartbeat(1, "m1", "i1", now=9.0) == WireError.none
    assert state.expire(now=9.5) == Step(None)
    assert set(state.members) == {"m1", "m2"}, "m2 is silent, within its session of 10 s"
    assert state.expire(now=10.5) == Step(None, arm_ms=10_000)
    assert state.instances == {"i1": "m1"} and state.phase is GroupPhase.PREPARING
    # Its instance id now joins as a new member.
    assert _join(state, "m3", fresh=True, instance_id="i2").response == Wait("m3")
    assert state.instances == {"i1": "m1", "i2": "m3"}


def test_a_static_member_leaves_by_its_ids_or_by_its_instance_id_alone() -> None:
    state = _static_stable()
    assert state.leave("m2", "i1") == Step(WireError.fenced_instance_id)
    assert state.leave("m2", "unknown") == Step(WireError.unknown_member_id)
    assert state.leave("", "unknown") == Step(WireError.unknown_member_id)
    assert state.leave("m2", "i2") == Step(WireError.none, arm_ms=10_000)
    assert state.instances == {"i1": "m1"} and state.phase is GroupPhase.PREPARING
    assert state.leave("", "i1") == Step(WireError.none, disarm=True)
    assert not state.members and state.phase is GroupPhase.EMPTY


def test_a_pending_member_id_joining_as_a_held_instance_id_replaces_its_holder() -> None:
    state = _static_stable()
    state.pending.add("p1")  # handed out with MEMBER_ID_REQUIRED
    rejoined = _join(state, "p1", instance_id="i2")
    assert rejoined == Step(JoinOutcome(WireError.none, 1, "range", "m1", "p1", []))
    assert state.instances == {"i1": "m1", "i2": "p1"} and not state.pending


def test_a_pending_member_id_may_leave() -> None:
    state = GroupState("g", 0)
    required = state.join(
        member_id="",
        instance_id=None,
        protocol_type="consumer",
        protocols=RANGE,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        fresh_member_id="p1",
        require_known_member_id=True,
        now=0.0,
    )
    assert required.response == JoinOutcome(WireError.member_id_required, member_id="p1")
    assert state.leave("p1", None) == Step(WireError.none)
    assert not state.pending and state.phase is GroupPhase.EMPTY
    assert state.leave("p1", None) == Step(WireError.unknown_member_id)


def test_the_last_member_leaving_cancels_the_timer() -> None:
    state = GroupState("g", 0)
    _join(state, "m1", fresh=True)
    left = state.leave("m1", None)
    assert left == Step(
        WireError.none,
        joins=(JoinOutcome(WireError.unknown_member_id, member_id="m1"),),
        disarm=True,
    )
    assert state.phase is GroupPhase.EMPTY


def test_a_leave_completes_a_rebalance_that_waits_only_for_the_leaver() -> None:
    state = GroupState("g", 0)
    _stable(state, "m1", "m2")
    assert _join(state, "m1") == Step(Wait("m1"), arm_ms=10_000)
    assert state.leave("m2", None) == Step(WireError.none, arm_ms=0)


def test_sessions_expire_by_the_time_given_except_while_waiting_to_join() -> None:
    state = GroupState("g", 0)
    _stable(state, "m1", "m2")
    assert state.heartbeat(1, "m1", None, now=20.0) == WireError.none
    assert state.expire(now=5.0) == Step(None)
    # m2 was last seen at 0 s, with a session of 10 s: it is dropped and the group rebalances.
    assert state.expire(now=20.5) == Step(None, arm_ms=10_000)
    assert set(state.members) == {"m1"} and state.phase is GroupPhase.PREPARING
    # m1 waits in a join: it is not idle, however long the wait.
    _join(state, "m1", now=20.5)
    assert state.expire(now=100.0) == Step(None)


def test_a_withdrawn_join_is_dropped_when_the_rebalance_is_due() -> None:
    state = GroupState("g", 0)
    _stable(state, "m1", "m2")
    _join(state, "m1")
    assert _join(state, "m2") == Step(Wait("m2"), arm_ms=0)
    state.withdraw("m2")  # its connection closed while it waited
    assert state.rebalance_due() == Step(None, store_generation=2)
    assert set(state.members) == {"m1"}


def test_a_join_withdrawn_while_its_generation_is_stored_is_not_answered() -> None:
    state = GroupState("g", 0)
    _join(state, "m1", fresh=True)
    _join(state, "m2", fresh=True)
    assert state.rebalance_due().store_generation == 1
    state.withdraw("m2")
    stored = state.generation_stored(1)
    assert [outcome.member_id for outcome in stored.joins] == ["m1"]
    assert set(state.members) == {"m1", "m2"}


def test_no_protocol_common_to_all_fails_every_member_once_stored() -> None:
    state = GroupState("g", 0)
    _join(state, "m1", fresh=True)
    _join(state, "m2", fresh=True, protocols=[("roundrobin", b"")])
    assert state.rebalance_due().store_generation == 1
    stored = state.generation_stored(1)
    assert stored == Step(
        None,
        joins=(
            JoinOutcome(WireError.inconsistent_group_protocol, member_id="m1"),
            JoinOutcome(WireError.inconsistent_group_protocol, member_id="m2"),
        ),
        disarm=True,
    )
    assert not state.members and state.phase is GroupPhase.EMPTY


def test_losing_the_group_answers_every_waiting_request_and_cancels_the_timer() -> None:
    state = _follower_waits_to_sync()
    _join(state, "m3", fresh=True)  # m2's sync is answered; m3 waits to join
    lost = state.fail_all(WireError.not_coordinator)
    assert lost == Step(
        None, joins=(JoinOutcome(WireError.not_coordinator, member_id="m3"),), disarm=True
    )
    assert not state.members and not state.instances and state.phase is GroupPhase.EMPTY
