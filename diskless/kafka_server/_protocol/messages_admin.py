"""The admin APIs' advertised versions, one union of kio request classes per API (as `messages`
declares the others; split off to keep each module small).

- DeleteTopics v6, which may name a topic by its id (KIP-516), the coordinator's.
- CreateTopics v7, CreatePartitions v3, DescribeConfigs v4, DeleteRecords v2: kio's newest.
  The clients pick what they know below that (librdkafka 2.x: CreateTopics v4, DescribeConfigs
  v1, DeleteRecords v1).
- CreateTopics v2, DeleteTopics v1 and DescribeConfigs v1, kio's oldest, are below what any
  client of the acceptance tests sends.
- AlterConfigs v0 to v2 and IncrementalAlterConfigs v0 to v1, kio's whole ranges (librdkafka
  sends IncrementalAlterConfigs v1, kafka-python AlterConfigs v1).
- CreateAcls, DescribeAcls, DeleteAcls v1 to v3: v1 added pattern types (KIP-290), which
  kio's oldest has; librdkafka sends v1.
"""

from __future__ import annotations

from typing import TypeAlias

import kio.schema.alter_configs.v0 as alter_configs_v0
import kio.schema.alter_configs.v1 as alter_configs_v1
import kio.schema.alter_configs.v2 as alter_configs_v2
import kio.schema.create_acls.v1 as create_acls_v1
import kio.schema.create_acls.v2 as create_acls_v2
import kio.schema.create_acls.v3 as create_acls_v3
import kio.schema.create_partitions.v0 as create_partitions_v0
import kio.schema.create_partitions.v1 as create_partitions_v1
import kio.schema.create_partitions.v2 as create_partitions_v2
import kio.schema.create_partitions.v3 as create_partitions_v3
import kio.schema.create_topics.v2 as create_topics_v2
import kio.schema.create_topics.v3 as create_topics_v3
import kio.schema.create_topics.v4 as create_topics_v4
import kio.schema.create_topics.v5 as create_topics_v5
import kio.schema.create_topics.v6 as create_topics_v6
import kio.schema.create_topics.v7 as create_topics_v7
import kio.schema.delete_acls.v1 as delete_acls_v1
import kio.schema.delete_acls.v2 as delete_acls_v2
import kio.schema.delete_acls.v3 as delete_acls_v3
import kio.schema.delete_records.v0 as delete_records_v0
import kio.schema.delete_records.v1 as delete_records_v1
import kio.schema.delete_records.v2 as delete_records_v2
import kio.schema.delete_topics.v1 as delete_topics_v1
import kio.schema.delete_topics.v2 as delete_topics_v2
import kio.schema.delete_topics.v3 as delete_topics_v3
import kio.schema.delete_topics.v4 as delete_topics_v4
import kio.schema.delete_topics.v5 as delete_topics_v5
import kio.schema.delete_topics.v6 as delete_topics_v6
import kio.schema.describe_acls.v1 as describe_acls_v1
import kio.schema.describe_acls.v2 as describe_acls_v2
import kio.schema.describe_acls.v3 as describe_acls_v3
import kio.schema.describe_configs.v1 as describe_configs_v1
import kio.schema.describe_configs.v2 as describe_configs_v2
import kio.schema.describe_configs.v3 as describe_configs_v3
import kio.schema.describe_configs.v4 as describe_configs_v4
import kio.schema.incremental_alter_configs.v0 as incremental_alter_configs_v0
import kio.schema.incremental_alter_configs.v1 as incremental_alter_configs_v1

CreateTopicsRequest: TypeAlias = (
    create_topics_v2.CreateTopicsRequest
    | create_topics_v3.CreateTopicsRequest
    | create_topics_v4.CreateTopicsRequest
    | create_topics_v5.CreateTopicsRequest
    | create_topics_v6.CreateTopicsRequest
    | create_topics_v7.CreateTopicsRequest
)
DeleteTopicsRequest: TypeAlias = (
    delete_topics_v1.DeleteTopicsRequest
    | delete_topics_v2.DeleteTopicsRequest
    | delete_topics_v3.DeleteTopicsRequest
    | delete_topics_v4.DeleteTopicsRequest
    | delete_topics_v5.DeleteTopicsRequest
    | delete_topics_v6.DeleteTopicsRequest
)
CreatePartitionsRequest: TypeAlias = (
    create_partitions_v0.CreatePartitionsRequest
    | create_partitions_v1.CreatePartitionsRequest
    | create_partitions_v2.CreatePartitionsRequest
    | create_partitions_v3.CreatePartitionsRequest
)
DescribeConfigsRequest: TypeAlias = (
    describe_configs_v1.DescribeConfigsRequest
    | describe_configs_v2.DescribeConfigsRequest
    | describe_configs_v3.DescribeConfigsRequest
    | describe_configs_v4.DescribeConfigsRequest
)
DeleteRecordsRequest: TypeAlias = (
    delete_records_v0.DeleteRecordsRequest
    | delete_records_v1.DeleteRecordsRequest
    | delete_records_v2.DeleteRecordsRequest
)
CreateAclsRequest: TypeAlias = (
    create_acls_v1.CreateAclsRequest
    | create_acls_v2.CreateAclsRequest
    | create_acls_v3.CreateAclsRequest
)
DescribeAclsRequest: TypeAlias = (
    describe_acls_v1.DescribeAclsRequest
    | describe_acls_v2.DescribeAclsRequest
    | describe_acls_v3.DescribeAclsRequest
)
DeleteAclsRequest: TypeAlias = (
    delete_acls_v1.DeleteAclsRequest
    | delete_acls_v2.DeleteAclsRequest
    | delete_acls_v3.DeleteAclsRequest
)
AlterConfigsRequest: TypeAlias = (
    alter_configs_v0.AlterConfigsRequest
    | alter_configs_v1.AlterConfigsRequest
    | alter_configs_v2.AlterConfigsRequest
)
IncrementalAlterConfigsRequest: TypeAlias = (
    incremental_alter_configs_v0.IncrementalAlterConfigsRequest
    | incremental_alter_configs_v1.IncrementalAlterConfigsRequest
)
