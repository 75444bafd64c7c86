"""What the brokers of a cluster agree on through the batch coordinator, served in Kafka's terms:
membership and the leaders Metadata names (`cluster_view`), consumer groups (`group_coordinator`;
`owned_group`, a group of either protocol, with the classic protocol's `group_state` and the
consumer protocol's `consumer_group_state` carried out by `consumer_steps`; and
`group_description`, what the admin APIs read of a group) and their configs (`group_configs`),
the transaction front end (`txn_front`) and the SCRAM credentials (`credentials`). The handlers
call these; they know nothing of requests or connections."""
