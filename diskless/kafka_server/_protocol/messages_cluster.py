"""The cluster and transaction admin APIs' advertised versions, one union of kio request classes
per API (as `messages` declares the others).

- DescribeCluster v0-v2: v1 added `endpoint_type`, v2 `include_fenced_brokers` (KIP-1073; no
  broker here is ever listed fenced).
- DescribeTopicPartitions v0 (KIP-966), DescribeProducers v0, DescribeTransactions v0: their
  only versions.
- DescribeLogDirs v1-v4: kio's oldest to v4 (v4 adds the volume's sizes, unknown here: -1).
- ListTransactions v0-v1: v1 added the duration filter (KIP-994); v2's transactional id pattern
  (KIP-1152) is not served.
- ElectLeaders v0-v2: v1 added the election type and a top-level error, v2 is flexible.
"""

from __future__ import annotations

from typing import TypeAlias

import kio.schema.describe_cluster.v0 as describe_cluster_v0
import kio.schema.describe_cluster.v1 as describe_cluster_v1
import kio.schema.describe_cluster.v2 as describe_cluster_v2
import kio.schema.describe_log_dirs.v1 as describe_log_dirs_v1
import kio.schema.describe_log_dirs.v2 as describe_log_dirs_v2
import kio.schema.describe_log_dirs.v3 as describe_log_dirs_v3
import kio.schema.describe_log_dirs.v4 as describe_log_dirs_v4
import kio.schema.describe_producers.v0 as describe_producers_v0
import kio.schema.describe_topic_partitions.v0 as describe_topic_partitions_v0
import kio.schema.describe_transactions.v0 as describe_transactions_v0
import kio.schema.elect_leaders.v0 as elect_leaders_v0
import kio.schema.elect_leaders.v1 as elect_leaders_v1
import kio.schema.elect_leaders.v2 as elect_leaders_v2
import kio.schema.list_transactions.v0 as list_transactions_v0
import kio.schema.list_transactions.v1 as list_transactions_v1

DescribeClusterRequest: TypeAlias = (
    describe_cluster_v0.DescribeClusterRequest
    | describe_cluster_v1.DescribeClusterRequest
    | describe_cluster_v2.DescribeClusterRequest
)
DescribeTopicPartitionsRequest: TypeAlias = (
    describe_topic_partitions_v0.DescribeTopicPartitionsRequest
)
DescribeLogDirsRequest: TypeAlias = (
    describe_log_dirs_v1.DescribeLogDirsRequest
    | describe_log_dirs_v2.DescribeLogDirsRequest
    | describe_log_dirs_v3.DescribeLogDirsRequest
    | describe_log_dirs_v4.DescribeLogDirsRequest
)
ElectLeadersRequest: TypeAlias = (
    elect_leaders_v0.ElectLeadersRequest
    | elect_leaders_v1.ElectLeadersRequest
    | elect_leaders_v2.ElectLeadersRequest
)
DescribeProducersRequest: TypeAlias = describe_producers_v0.DescribeProducersRequest
DescribeTransactionsRequest: TypeAlias = describe_transactions_v0.DescribeTransactionsRequest
ListTransactionsRequest: TypeAlias = (
    list_transactions_v0.ListTransactionsRequest | list_transactions_v1.ListTransactionsRequest
)
