"""Unit: the authorizer's decision is Kafka's StandardAuthorizer's (a pure function of the ACLs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diskless.coordinator import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from diskless.kafka_server import ServerConfig
from diskless.kafka_server.__main__ import COMMIT_BOUNDS, _parser
from diskless.kafka_server._coordination.authorizer import (
    AclIndex,
    AuthorizerSettings,
    authorize,
    authorize_any,
    parse_super_users,
)
from diskless.kafka_server._server.process import cli
from diskless.kafka_server._server.settings.server_properties import server_config

Op = AclOperation
T = ResourceType.TOPIC
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
ALICE = "User:alice"
HOST = "10.0.0.5"
DEFAULTS = AuthorizerSettings()


def acl(
    name: str,
    operation: AclOperation,
    permission: AclPermissionType = ALLOW,
    *,
    pattern: PatternType = PatternType.LITERAL,
    principal: str = ALICE,
    host: str = "*",
    resource_type: ResourceType = T,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def allowed(
    bindings: list[AclBinding],
    operation: AclOperation,
    name: str = "orders",
    *,
    principal: str = ALICE,
    host: str = HOST,
    settings: AuthorizerSettings = DEFAULTS,
    resource_type: ResourceType = T,
) -> bool:
    index = AclIndex(bindings)
    return authorize(index, settings, principal, host, operation, resource_type, name)


def test_no_acl_denies_unless_everyone_is_allowed_then() -> None:
    assert not allowed([], Op.READ)
    assert allowed([], Op.READ, settings=AuthorizerSettings(allow_if_no_acl=True))
    # A resource with an ACL for someone else is not "without ACLs": denied.
    other = [acl("orders", Op.READ, principal="User:bob")]
    assert not allowed(other, Op.READ, settings=AuthorizerSettings(allow_if_no_acl=True))
    # ... while another resource still has none.
    assert allowed(other, Op.READ, "else", settings=AuthorizerSettings(allow_if_no_acl=True))


def test_deny_wins_over_allow() -> None:
    bindings = [acl("orders", Op.READ), acl("ord", Op.READ, DENY, pattern=PatternType.PREFIXED)]
    assert not allowed(bindings, Op.READ)
    assert allowed(bindings[:1], Op.READ)
    assert not allowed([acl("orders", Op.ALL), acl("*", Op.ALL, DENY)], Op.WRITE)


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_describe_is_implied(granted: AclOperation) -> None:
    assert allowed([acl("orders", granted)], Op.DESCRIBE)


@pytest.mark.parametrize("granted", [Op.CREATE, Op.DESCRIBE_CONFIGS, Op.IDEMPOTENT_WRITE])
def test_describe_is_not_implied_by_others(granted: AclOperation) -> None:
    assert not allowed([acl("orders", granted)], Op.DESCRIBE)


def test_describe_configs_is_implied_by_alter_configs_and_all_by_all() -> None:
    assert allowed([acl("orders", Op.ALTER_CONFIGS)], Op.DESCRIBE_CONFIGS)
    assert not allowed([acl("orders", Op.DESCRIBE_CONFIGS)], Op.ALTER_CONFIGS)
    for operation in (Op.READ, Op.WRITE, Op.CREATE, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE):
        assert allowed([acl("orders", Op.ALL)], operation)


def test_a_deny_implies_nothing() -> None:
    """A DENY of READ does not deny DESCRIBE (Kafka's implication holds for ALLOW only)."""
    assert allowed([acl("orders", Op.DESCRIBE), acl("orders", Op.READ, DENY)], Op.DESCRIBE)
    assert not allowed([acl("orders", Op.DESCRIBE), acl("orders", Op.READ, DENY)], Op.READ)


def test_patterns_wildcards_principals_and_hosts() -> None:
    prefixed = [acl("ord", Op.READ, pattern=PatternType.PREFIXED)]
    assert allowed(prefixed, Op.READ, "orders") and not allowed(prefixed, Op.READ, "or")
    literal = [acl("ord", Op.READ)]
    assert not allowed(literal, Op.READ, "orders")
    assert allowed([acl("*", Op.READ)], Op.READ, "anything")
    # A prefix `*` is no wildcard: only names starting with `*`.
    assert not allowed([acl("*", Op.READ, pattern=PatternType.PREFIXED)], Op.READ, "orders")
    assert allowed([acl("orders", Op.READ, principal="User:*")], Op.READ)
    assert not allowed([acl("orders", Op.READ, principal="User:bob")], Op.READ)
    assert allowed([acl("orders", Op.READ, host=HOST)], Op.READ)
    assert not allowed([acl("orders", Op.READ, host="10.0.0.6")], Op.READ)
    # Resource types do not mix.
    group = [acl("orders", Op.READ, resource_type=ResourceType.GROUP)]
    assert not allowed(group, Op.READ)
    assert allowed(group, Op.READ, resource_type=ResourceType.GROUP)


def test_super_users_bypass_every_acl() -> None:
    settings = AuthorizerSettings(parse_super_users(" User:admin ;User:CN=ops,O=x;"))
    assert settings.super_users == {"User:admin", "User:CN=ops,O=x"}
    deny_all = [acl("*", Op.ALL, DENY, principal="User:*")]
    assert allowed(deny_all, Op.ALTER, principal="User:admin", settings=settings)
    assert not allowed(deny_all, Op.ALTER, principal=ALICE, settings=settings)


def test_authorize_any_is_kafkas_by_resource_type() -> None:
    """KIP-679: WRITE on some topic lets an idempotent producer in."""
    settings = AuthorizerSettings()

    def any_write(bindings: list[AclBinding]) -> bool:
        return authorize_any(AclIndex(bindings), settings, ALICE, HOST, Op.WRITE, T)

    assert not any_write([])
    assert any_write([acl("a", Op.WRITE)])
    assert any_write([acl("x", Op.WRITE, pattern=PatternType.PREFIXED)])
    assert not any_write([acl("a", Op.WRITE), acl("a", Op.WRITE, DENY)])
    assert not any_write(
        [
            acl("xy", Op.WRITE, pattern=PatternType.PREFIXED),
            acl("x", Op.WRITE, DENY, pattern=PatternType.PREFIXED),
        ]
    )
    assert not any_write([acl("a", Op.WRITE), acl("*", Op.WRITE, DENY)])
    assert not any_write([acl("a", Op.READ)])
    assert any_write([acl("a", Op.WRITE), acl("b", Op.WRITE, DENY)])


def test_kafkas_properties_enable_it_and_a_foreign_authorizer_fails_naming_its_property() -> None:
    config = server_config(
        {
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin;User:ops",
            "allow.everyone.if.no.acl.found": "true",
        }
    )
    assert config.authorizer_enabled and config.allow_everyone_if_no_acl_found
    assert parse_super_users(config.super_users) == {"User:admin", "User:ops"}
    assert not ServerConfig().authorizer_enabled
    with pytest.raises(ValueError, match=r"^authorizer\.class\.name: 'com\.example\.Mine'"):
        server_config({"authorizer.class.name": "com.example.Mine"})


def test_the_flags_override_the_files_authorizer_settings(tmp_path: Path) -> None:
    file = server_config(
        {
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:from-file",
        }
    )
    data = ["--data-dir", str(tmp_path / "data")]

    def server(*flags: str) -> ServerConfig:
        args = _parser().parse_args([*data, *flags])
        return cli.configs(args, [0], COMMIT_BOUNDS, file).server

    kept = server()
    assert (kept.authorizer_class_name, kept.super_users) == (
        file.authorizer_class_name,
        "User:from-file",
    )
    assert not kept.allow_everyone_if_no_acl_found
    given = server("--super-users", "User:flag", "--allow-everyone-if-no-acl-found")
    assert given.super_users == "User:flag" and given.allow_everyone_if_no_acl_found
    assert given.authorizer_class_name == file.authorizer_class_name
    assert not server("--authorizer-class-name", "").authorizer_enabled
