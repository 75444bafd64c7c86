"""A classic group member's id, handed out by whichever process coordinates the group now."""

from __future__ import annotations

import uuid


def fresh_member_id(client_id: str, instance_id: str | None) -> str:
    """A member id no coordinator of the group ever handed out: Kafka's form, the instance id
    (a static member) or else the client id, then a random UUID. A counter of this process
    would not do: after the group moves, the new owner's count starts again, a rejoining client
    could be given the id another client still holds, and the two would be taken for one."""
    return f"{instance_id if instance_id is not None else client_id}-{uuid.uuid4()}"
