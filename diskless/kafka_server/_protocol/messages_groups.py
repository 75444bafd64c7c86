"""The group admin APIs' advertised versions, one union of kio request classes per API (as
`messages` declares the others; split off to keep each module small).

- DescribeGroups v0 to v5: v3 adds KIP-430's authorized operations, v4 static members' instance
  ids. v6 (KIP-1043) answers a group that does not exist with GROUP_ID_NOT_FOUND where earlier
  versions describe it as Dead; this server describes it as Dead.
- ListGroups v0 to v5, kio's newest: v4 adds the state filter (KIP-518), v5 the type filter
  (KIP-848).
- DeleteGroups v0 to v2, OffsetDelete v0: kio's every version.
"""

from __future__ import annotations

from typing import TypeAlias

import kio.schema.delete_groups.v0 as delete_groups_v0
import kio.schema.delete_groups.v1 as delete_groups_v1
import kio.schema.delete_groups.v2 as delete_groups_v2
import kio.schema.describe_groups.v0 as describe_groups_v0
import kio.schema.describe_groups.v1 as describe_groups_v1
import kio.schema.describe_groups.v2 as describe_groups_v2
import kio.schema.describe_groups.v3 as describe_groups_v3
import kio.schema.describe_groups.v4 as describe_groups_v4
import kio.schema.describe_groups.v5 as describe_groups_v5
import kio.schema.list_groups.v0 as list_groups_v0
import kio.schema.list_groups.v1 as list_groups_v1
import kio.schema.list_groups.v2 as list_groups_v2
import kio.schema.list_groups.v3 as list_groups_v3
import kio.schema.list_groups.v4 as list_groups_v4
import kio.schema.list_groups.v5 as list_groups_v5
import kio.schema.offset_delete.v0 as offset_delete_v0

DescribeGroupsRequest: TypeAlias = (
    describe_groups_v0.DescribeGroupsRequest
    | describe_groups_v1.DescribeGroupsRequest
    | describe_groups_v2.DescribeGroupsRequest
    | describe_groups_v3.DescribeGroupsRequest
    | describe_groups_v4.DescribeGroupsRequest
    | describe_groups_v5.DescribeGroupsRequest
)
ListGroupsRequest: TypeAlias = (
    list_groups_v0.ListGroupsRequest
    | list_groups_v1.ListGroupsRequest
    | list_groups_v2.ListGroupsRequest
    | list_groups_v3.ListGroupsRequest
    | list_groups_v4.ListGroupsRequest
    | list_groups_v5.ListGroupsRequest
)
DeleteGroupsRequest: TypeAlias = (
    delete_groups_v0.DeleteGroupsRequest
    | delete_groups_v1.DeleteGroupsRequest
    | delete_groups_v2.DeleteGroupsRequest
)
OffsetDeleteRequest: TypeAlias = offset_delete_v0.OffsetDeleteRequest
