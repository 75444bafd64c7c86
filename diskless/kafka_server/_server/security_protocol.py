"""Kafka's security protocols, for the server's modules (and those of other packages) to import:
the enum itself is defined with the protocol, so that a connection's `Session`, which the
handlers see, can name it (`_protocol.security_protocol`)."""

from diskless.kafka_server._protocol.security_protocol import SecurityProtocol

__all__ = ["SecurityProtocol"]
