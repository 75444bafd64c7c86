"""A Kafka-protocol prototype broker on the diskless library.

Unmodified Kafka clients (librdkafka, kafka-python, aiokafka, ...) produce to and consume from
`DisklessBroker`s through this package. Each broker gets a Kafka listener on 127.0.0.1
(`BrokerServer`); a `KafkaCluster` runs several in one process, sharing one object store and one
batch coordinator. From a shell:

    python -m diskless.kafka_server --brokers 3 --racks 3 --data-dir DIR [--topic NAME:N]

Where to read on:
- `_versions`: the advertised API versions and why each range ends where it does;
- `_metadata`: how Metadata routes each client's produce requests to its rack's produce
  representative (there is no partition leader on the write path);
- `_server`: framing, ordering, and when a connection is closed rather than answered;
- `_codec` and `_declared_sizes`: decoding with kio, and what is checked before kio reads;
- `_handlers`: the handler of each API key; `_route` and `_messages` say how a request reaches
  its typed handler, `_handle_*` hold the handlers by family, `_errors` maps library failures
  to Kafka error codes;
- `_txn`: transactions, and the bridge from the clients' transaction version 1 to the library's
  transaction version 2;
- `_groups`: the minimal consumer-group coordinator.
"""

from diskless.kafka_server._coordination.cluster_view import BrokerAddress, ClusterView
from diskless.kafka_server._coordination.txn_front import TransactionFront
from diskless.kafka_server._handlers.table import SUPPORTED_VERSIONS
from diskless.kafka_server._protocol.apis import ApiKey
from diskless.kafka_server._server.broker_server import BrokerServer
from diskless.kafka_server._server.cluster import KafkaCluster, rack_name
from diskless.kafka_server._server.config import ServerConfig

__all__ = [
    # running brokers
    "BrokerServer",
    "KafkaCluster",
    "ServerConfig",
    "rack_name",
    # membership and routing
    "BrokerAddress",
    "ClusterView",
    # transactions
    "TransactionFront",
    # the protocol surface
    "SUPPORTED_VERSIONS",
    "ApiKey",
]
