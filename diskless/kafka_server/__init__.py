"""A Kafka-protocol prototype broker on the diskless library.

Unmodified Kafka clients produce to and consume from `DisklessBroker`s through this package: each
broker gets a Kafka listener (`BrokerServer`), several brokers form a `KafkaCluster` sharing one
object store and one batch coordinator, and Metadata sends every client's produce requests to its
rack's produce representative (see `_metadata`). Start one from a shell with
`python -m diskless.kafka_server --brokers 3 --racks 3 --data-dir DIR`.
"""

from diskless.kafka_server._cluster import KafkaCluster, rack_name
from diskless.kafka_server._metadata import BrokerAddress, ClusterView
from diskless.kafka_server._server import BrokerServer, ServerConfig
from diskless.kafka_server._txn import TransactionFront
from diskless.kafka_server._versions import SUPPORTED_VERSIONS, ApiKey

__all__ = [
    "SUPPORTED_VERSIONS",
    "ApiKey",
    "BrokerAddress",
    "BrokerServer",
    "ClusterView",
    "KafkaCluster",
    "ServerConfig",
    "TransactionFront",
    "rack_name",
]
