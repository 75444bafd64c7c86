"""Transactions: InitProducerId, AddPartitionsToTxn and EndTxn, through `TransactionFront`.

The front end bridges the clients' transaction version 1 to the library's version 2 (see
`_txn`); a failure of the coordinator is COORDINATOR_NOT_AVAILABLE (see `_errors`).
"""

from __future__ import annotations

from diskless._types import TopicPartition
from diskless.errors import DisklessError
from diskless.kafka_server._codec import build, nested
from diskless.kafka_server._context import BrokerContext, Connection
from diskless.kafka_server._errors import coordinator_error, failure
from diskless.kafka_server._messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from diskless.kafka_server._route import NO_THROTTLE, millis
from diskless.kafka_server._versions import ApiKey


async def handle_init_producer_id(
    context: BrokerContext,
    connection: Connection,
    request: InitProducerIdRequest,
    response: type[InitProducerIdResponse],
) -> InitProducerIdResponse:
    try:
        result = await context.transactions.init_producer_id(
            request.transactional_id, millis(request.transaction_timeout)
        )
        error = coordinator_error(result.error)
        producer_id, epoch = result.producer_id, result.producer_epoch
    except DisklessError as e:
        error = failure(ApiKey.INIT_PRODUCER_ID, e, "init producer id")
        producer_id, epoch = -1, -1
    return build(
        response,
        throttle_time=NO_THROTTLE,
        error_code=error,
        producer_id=producer_id,
        producer_epoch=epoch,
    )


async def handle_add_partitions_to_txn(
    context: BrokerContext,
    connection: Connection,
    request: AddPartitionsToTxnRequest,
    response: type[AddPartitionsToTxnResponse],
) -> AddPartitionsToTxnResponse:
    partitions = [
        TopicPartition(topic.name, int(p))
        for topic in request.v3_and_below_topics
        for p in topic.partitions
    ]
    try:
        codes = await context.transactions.add_partitions_to_txn(
            request.v3_and_below_transactional_id,
            int(request.v3_and_below_producer_id),
            int(request.v3_and_below_producer_epoch),
            partitions,
        )
        errors = [coordinator_error(code) for code in codes]
    except DisklessError as e:
        errors = [failure(ApiKey.ADD_PARTITIONS_TO_TXN, e, "add partitions to txn")] * len(
            partitions
        )
    results = dict(zip(partitions, errors, strict=True))
    topic_entry = nested(response, "AddPartitionsToTxnTopicResult")
    partition_entry = nested(response, "AddPartitionsToTxnPartitionResult")
    return build(
        response,
        throttle_time=NO_THROTTLE,
        results_by_topic_v3_and_below=tuple(
            build(
                topic_entry,
                name=topic.name,
                results_by_partition=tuple(
                    build(
                        partition_entry,
                        partition_index=p,
                        partition_error_code=results.get(
                            TopicPartition(topic.name, int(p)), coordinator_error(None)
                        ),
                    )
                    for p in topic.partitions
                ),
            )
            for topic in request.v3_and_below_topics
        ),
    )


async def handle_end_txn(
    context: BrokerContext,
    connection: Connection,
    request: EndTxnRequest,
    response: type[EndTxnResponse],
) -> EndTxnResponse:
    try:
        result = await context.transactions.end_txn(
            request.transactional_id,
            int(request.producer_id),
            int(request.producer_epoch),
            bool(request.committed),
        )
        error = coordinator_error(result.error)
    except DisklessError as e:
        error = failure(ApiKey.END_TXN, e, "end txn")
    return build(response, throttle_time=NO_THROTTLE, error_code=error)
