"""One share consumer (confluent-kafka's `ShareConsumer`) in a process of its own, for the share
group acceptance test (`test_share_consumers`): it may be SIGSTOPped or SIGKILLed while it holds
records.

    python -m tests.kafka_server._share_member BOOTSTRAP TOPIC GROUP MODE ROLE EVENTS STOP

MODE is explicit or implicit. ROLE `work` decides each record by its value (explicit mode:
REJECT when value % 10 == 3; RELEASE when value % 10 == 7 at its first delivery, and always when
value % 25 == 11; else ACCEPT; implicit mode: ACCEPT), commits after every poll and writes one
JSON line per record to EVENTS once the commit answered (value, partition, offset, delivery
count, what it did, whether the broker took it); it closes once the file STOP exists. ROLE `hold`
writes the records of its first non-empty poll (at most `HOLD_RECORDS`) as held and then does
nothing (it neither acknowledges nor polls again) until it is stopped or killed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from confluent_kafka import AcknowledgeType, ShareConsumer

POLL_S = 0.2
HOLD_RECORDS = 20
WORK_RECORDS = 50


def decision(value: int, delivery_count: int) -> str:
    if value % 10 == 3:
        return "reject"
    if value % 25 == 11 or (value % 10 == 7 and delivery_count == 1):
        return "release"
    return "accept"


_TYPES = {
    "accept": AcknowledgeType.ACCEPT,
    "release": AcknowledgeType.RELEASE,
    "reject": AcknowledgeType.REJECT,
}


def main(
    bootstrap: str, topic: str, group: str, mode: str, role: str, events: str, stop: str
) -> None:
    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": mode,
            "client.id": f"{role}-{os.getpid()}",
            "max.poll.records": HOLD_RECORDS if role == "hold" else WORK_RECORDS,
        }
    )
    consumer.subscribe([topic])
    with open(events, "a") as out:
        while not os.path.exists(stop):
            records = [m for m in consumer.poll(POLL_S) if m.error() is None]
            if not records:
                continue
            decided: list[dict[str, Any]] = []
            for m in records:
                value = int(m.value())
                action = "accept" if mode == "implicit" else decision(value, m.delivery_count())
                if role == "hold":
                    action = "hold"
                elif mode == "explicit":
                    consumer.acknowledge(m, _TYPES[action])
                decided.append(
                    {
                        "value": value,
                        "partition": m.partition(),
                        "offset": m.offset(),
                        "delivery_count": m.delivery_count(),
                        "action": action,
                    }
                )
            if role == "hold":
                for event in decided:
                    out.write(json.dumps({**event, "ok": True}) + "\n")
                out.flush()
                while True:  # holding, until stopped or killed
                    time.sleep(60)
            results = consumer.commit_sync(30)
            failed = {tp.partition for tp, error in results.items() if error is not None}
            for event in decided:
                out.write(json.dumps({**event, "ok": event["partition"] not in failed}) + "\n")
            out.flush()
    consumer.close()


if __name__ == "__main__":
    main(*sys.argv[1:8])
