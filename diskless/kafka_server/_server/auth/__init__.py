"""Who a client is: TLS settings and a certificate's principal (Kafka's mapping rules over its
X.500 name), and the server side of the SASL mechanisms with PLAIN's JAAS users. No sockets:
the network's authenticator drives these."""
