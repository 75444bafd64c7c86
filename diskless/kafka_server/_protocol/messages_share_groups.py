"""The share groups' (KIP-932) membership and admin APIs' advertised versions, one union of kio
request classes per API (as `messages` declares the others).

- ShareGroupHeartbeat v1 and ShareGroupDescribe v1: kio's only versions, those of Kafka 4.1 on
  (v0 was Kafka 4.0's early access, which Kafka no longer serves), which librdkafka's share
  consumer speaks.
- DescribeShareGroupOffsets v0 and v1 (v1 adds each partition's lag), AlterShareGroupOffsets v0,
  DeleteShareGroupOffsets v0: kio's every version.
"""

from __future__ import annotations

from typing import TypeAlias

import kio.schema.alter_share_group_offsets.v0 as alter_share_group_offsets_v0
import kio.schema.delete_share_group_offsets.v0 as delete_share_group_offsets_v0
import kio.schema.describe_share_group_offsets.v0 as describe_share_group_offsets_v0
import kio.schema.describe_share_group_offsets.v1 as describe_share_group_offsets_v1
import kio.schema.share_group_describe.v1 as share_group_describe_v1
import kio.schema.share_group_heartbeat.v1 as share_group_heartbeat_v1

ShareGroupHeartbeatRequest: TypeAlias = share_group_heartbeat_v1.ShareGroupHeartbeatRequest
ShareGroupDescribeRequest: TypeAlias = share_group_describe_v1.ShareGroupDescribeRequest
DescribeShareGroupOffsetsRequest: TypeAlias = (
    describe_share_group_offsets_v0.DescribeShareGroupOffsetsRequest
    | describe_share_group_offsets_v1.DescribeShareGroupOffsetsRequest
)
AlterShareGroupOffsetsRequest: TypeAlias = (
    alter_share_group_offsets_v0.AlterShareGroupOffsetsRequest
)
DeleteShareGroupOffsetsRequest: TypeAlias = (
    delete_share_group_offsets_v0.DeleteShareGroupOffsetsRequest
)
