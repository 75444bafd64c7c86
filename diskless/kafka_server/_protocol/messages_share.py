"""The advertised versions of the share group APIs (KIP-932) whose requests carry records:
ShareFetch and ShareAcknowledge, every version kio has (v1, Kafka 4.1's first stable one, and
v2, which adds RENEW acknowledgements and acquire modes)."""

from __future__ import annotations

from typing import TypeAlias

import kio.schema.share_acknowledge.v1 as share_acknowledge_v1
import kio.schema.share_acknowledge.v2 as share_acknowledge_v2
import kio.schema.share_fetch.v1 as share_fetch_v1
import kio.schema.share_fetch.v2 as share_fetch_v2

ShareFetchRequest: TypeAlias = share_fetch_v1.ShareFetchRequest | share_fetch_v2.ShareFetchRequest
ShareAcknowledgeRequest: TypeAlias = (
    share_acknowledge_v1.ShareAcknowledgeRequest | share_acknowledge_v2.ShareAcknowledgeRequest
)
