"""The security APIs' advertised versions, one union of kio request classes per API (as
`messages` declares the others).

- SaslHandshake v0-v1: v0 is followed by the mechanism's raw tokens, v1 by SaslAuthenticate.
- SaslAuthenticate v0-v2: v1 adds the session lifetime (always 0 here: no re-authentication is
  required), v2 is flexible.
- DescribeUserScramCredentials v0, AlterUserScramCredentials v0 (KIP-554): their only versions.
"""

from __future__ import annotations

from typing import TypeAlias

import kio.schema.alter_user_scram_credentials.v0 as alter_user_scram_credentials_v0
import kio.schema.describe_user_scram_credentials.v0 as describe_user_scram_credentials_v0
import kio.schema.sasl_authenticate.v0 as sasl_authenticate_v0
import kio.schema.sasl_authenticate.v1 as sasl_authenticate_v1
import kio.schema.sasl_authenticate.v2 as sasl_authenticate_v2
import kio.schema.sasl_handshake.v0 as sasl_handshake_v0
import kio.schema.sasl_handshake.v1 as sasl_handshake_v1

SaslHandshakeRequest: TypeAlias = (
    sasl_handshake_v0.SaslHandshakeRequest | sasl_handshake_v1.SaslHandshakeRequest
)
SaslAuthenticateRequest: TypeAlias = (
    sasl_authenticate_v0.SaslAuthenticateRequest
    | sasl_authenticate_v1.SaslAuthenticateRequest
    | sasl_authenticate_v2.SaslAuthenticateRequest
)
DescribeUserScramCredentialsRequest: TypeAlias = (
    describe_user_scram_credentials_v0.DescribeUserScramCredentialsRequest
)
AlterUserScramCredentialsRequest: TypeAlias = (
    alter_user_scram_credentials_v0.AlterUserScramCredentialsRequest
)
