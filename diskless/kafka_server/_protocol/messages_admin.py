"""The kio classes of the admin APIs' advertised versions, one typed union per API key and
direction (as `_messages` for the others; split off to keep each module small)."""

from __future__ import annotations

from typing import TypeAlias

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
import kio.schema.delete_records.v0 as delete_records_v0
import kio.schema.delete_records.v1 as delete_records_v1
import kio.schema.delete_records.v2 as delete_records_v2
import kio.schema.delete_topics.v1 as delete_topics_v1
import kio.schema.delete_topics.v2 as delete_topics_v2
import kio.schema.delete_topics.v3 as delete_topics_v3
import kio.schema.delete_topics.v4 as delete_topics_v4
import kio.schema.delete_topics.v5 as delete_topics_v5
import kio.schema.describe_configs.v1 as describe_configs_v1
import kio.schema.describe_configs.v2 as describe_configs_v2
import kio.schema.describe_configs.v3 as describe_configs_v3
import kio.schema.describe_configs.v4 as describe_configs_v4

CreateTopicsRequest: TypeAlias = (
    create_topics_v2.CreateTopicsRequest
    | create_topics_v3.CreateTopicsRequest
    | create_topics_v4.CreateTopicsRequest
    | create_topics_v5.CreateTopicsRequest
    | create_topics_v6.CreateTopicsRequest
    | create_topics_v7.CreateTopicsRequest
)
CreateTopicsResponse: TypeAlias = (
    create_topics_v2.CreateTopicsResponse
    | create_topics_v3.CreateTopicsResponse
    | create_topics_v4.CreateTopicsResponse
    | create_topics_v5.CreateTopicsResponse
    | create_topics_v6.CreateTopicsResponse
    | create_topics_v7.CreateTopicsResponse
)
DeleteTopicsRequest: TypeAlias = (
    delete_topics_v1.DeleteTopicsRequest
    | delete_topics_v2.DeleteTopicsRequest
    | delete_topics_v3.DeleteTopicsRequest
    | delete_topics_v4.DeleteTopicsRequest
    | delete_topics_v5.DeleteTopicsRequest
)
DeleteTopicsResponse: TypeAlias = (
    delete_topics_v1.DeleteTopicsResponse
    | delete_topics_v2.DeleteTopicsResponse
    | delete_topics_v3.DeleteTopicsResponse
    | delete_topics_v4.DeleteTopicsResponse
    | delete_topics_v5.DeleteTopicsResponse
)
CreatePartitionsRequest: TypeAlias = (
    create_partitions_v0.CreatePartitionsRequest
    | create_partitions_v1.CreatePartitionsRequest
    | create_partitions_v2.CreatePartitionsRequest
    | create_partitions_v3.CreatePartitionsRequest
)
CreatePartitionsResponse: TypeAlias = (
    create_partitions_v0.CreatePartitionsResponse
    | create_partitions_v1.CreatePartitionsResponse
    | create_partitions_v2.CreatePartitionsResponse
    | create_partitions_v3.CreatePartitionsResponse
)
DescribeConfigsRequest: TypeAlias = (
    describe_configs_v1.DescribeConfigsRequest
    | describe_configs_v2.DescribeConfigsRequest
    | describe_configs_v3.DescribeConfigsRequest
    | describe_configs_v4.DescribeConfigsRequest
)
DescribeConfigsResponse: TypeAlias = (
    describe_configs_v1.DescribeConfigsResponse
    | describe_configs_v2.DescribeConfigsResponse
    | describe_configs_v3.DescribeConfigsResponse
    | describe_configs_v4.DescribeConfigsResponse
)
DeleteRecordsRequest: TypeAlias = (
    delete_records_v0.DeleteRecordsRequest
    | delete_records_v1.DeleteRecordsRequest
    | delete_records_v2.DeleteRecordsRequest
)
DeleteRecordsResponse: TypeAlias = (
    delete_records_v0.DeleteRecordsResponse
    | delete_records_v1.DeleteRecordsResponse
    | delete_records_v2.DeleteRecordsResponse
)
