"""A Kafka-protocol prototype broker on the diskless library.

Unmodified Kafka clients (librdkafka, kafka-python, aiokafka, ...) produce to and consume from
`DisklessBroker`s through this package. Each broker gets Kafka's listeners (`BrokerServer`; by
default one PLAINTEXT listener on 127.0.0.1, else `listeners`, `advertised.listeners` and TLS as
Kafka configures them); a `KafkaCluster` runs several in one process, sharing one object store
and one batch coordinator. From a shell:

    python -m diskless.kafka_server --brokers 3 --racks 3 --data-dir DIR [--topic NAME:N]
    python -m diskless.kafka_server --config server.properties [--override NAME=VALUE ...]

Four parts, each importing only from those before it and only their public modules
(`tests/test_layering.py`), as Kafka splits its broker into the network layer, the API handlers
and the coordinators:
- `_protocol`: the Kafka protocol as this server speaks it. `messages`, `messages_admin` and
  `messages_security` declare each advertised API once, as the union of its kio request classes
  (why each range stops where it does is said there); `apis` reads key, versions and response
  classes from a union; `codec` frames, decodes and encodes, after `_declared_sizes` has checked
  what kio would otherwise trust; `fields` builds response entities for every version at once.
- `_coordination`: what the brokers agree on through the batch coordinator, in Kafka's terms:
  membership and the leaders Metadata names (`cluster_view`: each client's produce requests go
  to its rack's produce representative, since the write path has no partition leader), the
  consumer groups (`group_coordinator`, `group_state`), transactions (`txn_front`, the bridge
  from the clients' transaction version 1 to the library's version 2), the SCRAM credentials
  every broker authenticates against (`credentials`) and the ACLs (`acl_cache`), of which each
  process holds a copy kept current by one refresh loop (`refresher`), and Kafka's authorizer
  rules, which decide on the ACLs (`authorizer`).
- `_handlers`: one module per API family, each handler shaped decode, authorize (`_access`),
  call the library, encode; `table` lists them (a handler's annotation declares its API) and is
  all the server sees of them. A library failure gets the code of the library's error table
  (`diskless._kafka_errors`) for the API's family.
- `_server`: each broker's listeners (`broker_server`, `listeners`, `tls`), its connections
  (framing, order, the request byte budget, when a connection is closed rather than answered;
  who is at the other end, `_peer`), the SASL authentication a SASL listener's connections go
  through first (`_authenticator`, over the mechanisms `_sasl_plain` and `_sasl_scram`), the
  cluster of brokers one process runs (`cluster`), their settings (`config`, and Kafka's
  property names for them: `server_properties`, read from a properties file by `properties`),
  the command line (`cli`, `cli_properties`), the lifecycle services a process runs beside
  its brokers (`services`), and the process's metrics and health endpoint (`observability`,
  over `metrics_*`).
"""

from diskless.kafka_server._coordination.cluster_view import BrokerAddress, ClusterView
from diskless.kafka_server._coordination.txn_front import TransactionFront
from diskless.kafka_server._handlers.table import SUPPORTED_VERSIONS
from diskless.kafka_server._protocol.apis import ApiKey
from diskless.kafka_server._server.metrics.metrics_events import PrometheusMetrics
from diskless.kafka_server._server.network.broker_server import BrokerServer
from diskless.kafka_server._server.process.cli import Parser as CommandParser
from diskless.kafka_server._server.process.cli import UsageError
from diskless.kafka_server._server.process.cluster import KafkaCluster, rack_name
from diskless.kafka_server._server.process.observability import Observability
from diskless.kafka_server._server.process.storage_options import (
    add_storage_arguments,
    check_storage_arguments,
    open_coordinator,
    open_store,
)
from diskless.kafka_server._server.settings.config import ServerConfig

__all__ = [
    # running brokers
    "BrokerServer",
    "KafkaCluster",
    "ServerConfig",
    "rack_name",
    # metrics and health
    "Observability",
    "PrometheusMetrics",
    # membership and routing
    "BrokerAddress",
    "ClusterView",
    # transactions
    "TransactionFront",
    # the protocol surface
    "SUPPORTED_VERSIONS",
    "ApiKey",
    # the storage flags of a command that opens a cluster's storage (the broker's, the mirror's)
    "CommandParser",
    "UsageError",
    "add_storage_arguments",
    "check_storage_arguments",
    "open_coordinator",
    "open_store",
]
