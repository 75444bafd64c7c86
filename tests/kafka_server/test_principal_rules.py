"""Unit: Kafka's `ssl.principal.mapping.rules`, on the examples of Kafka's documentation and the
corner cases of its rule syntax."""

from __future__ import annotations

import pytest

from diskless.kafka_server._server.auth._principal_rules import map_name, parse_rules

DOCUMENTED = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
    "DEFAULT"
)


@pytest.mark.parametrize(
    ("dn", "name"),
    [
        ("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown", "serviceuser"),
        ("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown", "adminuser@admin"),
        ("OU=Admin,CN=kafka.example,O=Unknown", "KAFKA.EXAMPLE"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
    ],
)
def test_the_first_rule_that_matches_the_whole_dn_names_the_principal(dn: str, name: str) -> None:
    assert map_name(parse_rules(DOCUMENTED), dn) == name


def test_without_default_a_dn_no_rule_matches_has_no_name() -> None:
    rules = parse_rules("RULE:^CN=([^,]*),OU=clients.*$/$1/")
    assert map_name(rules, "CN=alice,OU=clients,O=x") == "alice"
    assert map_name(rules, "CN=alice,OU=servers,O=x") is None
    assert map_name(parse_rules("DEFAULT"), "CN=a") == "CN=a"


def test_escapes_and_blanks_in_the_rule_list() -> None:
    rules = parse_rules("  RULE:^CN=(.*)\\/x$/$1\\/y\\$/ ,  DEFAULT  ")
    assert len(rules) == 2
    assert map_name(rules, "CN=a/x") == "a/y$"


@pytest.mark.parametrize(
    ("rules", "why"),
    [
        ("RULE:^CN=(.*)$", "invalid rule"),
        ("RULE:^CN=(.*$/$1/", "invalid pattern"),
        ("DEFAULT, nonsense", "invalid rule 'nonsense'"),
        ("  ", "no rule"),
    ],
)
def test_a_malformed_rule_is_refused_naming_the_property(rules: str, why: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_rules(rules)
    assert str(refused.value).startswith("ssl.principal.mapping.rules: ")
    assert why in str(refused.value)
