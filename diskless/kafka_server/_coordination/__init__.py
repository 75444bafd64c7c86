"""What the brokers of a cluster agree on through the batch coordinator, served in Kafka's terms:
membership and the leaders Metadata names (`cluster_view`), consumer groups
(`group_coordinator`, `group_state`, and `group_description`, what the admin APIs read of a
group) and their configs (`group_configs`), the transaction front end (`txn_front`) and the
SCRAM credentials (`credentials`). The handlers call these; they know nothing of requests or
connections."""
