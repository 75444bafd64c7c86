"""A version 1 transactional producer speaking the wire protocol directly, so that every step
(InitProducerId, AddPartitionsToTxn, Produce, EndTxn) happens in a fixed order."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import kio.schema.add_partitions_to_txn.v1.request as add_partitions_v1
import kio.schema.end_txn.v1.request as end_txn_v1
import kio.schema.init_producer_id.v1.request as init_producer_id_v1
from kio.schema.errors import ErrorCode as WireError
from kio.schema.produce.v9 import request as produce_v9
from kio.static.primitive import i16, i32

from testkit.batches import build_batch
from testkit.clients import value
from testkit.processes import BrokerProcess
from testkit.wire import WireClient

TOPIC = "paused"
TID = "paused-producer"


class RawProducer:
    """InitProducerId, AddPartitionsToTxn, Produce and EndTxn as a version 1 client sends them."""

    def __init__(self, client: WireClient) -> None:
        self.client = client
        self.pid = -1

    @classmethod
    async def connect(cls, broker: BrokerProcess) -> RawProducer:
        host, _, port = broker.address.rpartition(":")
        return cls(WireClient(*await asyncio.open_connection(host, int(port))))

    async def close(self) -> None:
        await self.client.close()

    async def init(self) -> None:
        response = await self.client.request(
            init_producer_id_v1.InitProducerIdRequest(
                transactional_id=TID, transaction_timeout=datetime.timedelta(seconds=60)
            )
        )
        assert response.error_code is WireError.none and response.producer_epoch == 0, response
        self.pid = int(response.producer_id)

    async def add(self, pid: int) -> WireError:
        response = await self.client.request(
            add_partitions_v1.AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=TID,
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=i16(0),
                v3_and_below_topics=(
                    add_partitions_v1.AddPartitionsToTxnTopic(name=TOPIC, partitions=(i32(0),)),
                ),
            )
        )
        (topic,) = response.results_by_topic_v3_and_below
        (partition,) = topic.results_by_partition
        return WireError(partition.partition_error_code)

    async def commit(self, pid: int) -> WireError:
        response = await self.client.request(
            end_txn_v1.EndTxnRequest(
                transactional_id=TID, producer_id=pid, producer_epoch=i16(0), committed=True
            )
        )
        return WireError(response.error_code)


def produce_request(pid: int, sequence: int, count: int) -> Any:
    records = build_batch(
        [value("txn", sequence + i) for i in range(count)],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=sequence,
        transactional=True,
    )
    return produce_v9.ProduceRequest(
        transactional_id=TID,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            produce_v9.TopicProduceData(
                name=TOPIC,
                partition_data=(produce_v9.PartitionProduceData(index=0, records=records),),
            ),
        ),
    )


def partition_error(response: Any) -> WireError:
    ((partition,),) = (t.partition_responses for t in response.responses)
    return WireError(partition.error_code)
