"""Kafka's JAAS configuration lines, the form of `listener.name.<listener>.plain.sasl.jaas.config`:

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice";

one login module (its class, a control flag, then `name=value` options; a value quoted with `"`,
where `\\` escapes the next character, or a bare word), ended by `;`. For PLAIN, each
`user_<name>="<password>"` option is a user the listener accepts (`username` and `password` are
what a broker would log in with elsewhere; they are not users here).
"""

from __future__ import annotations

from typing import Final, NamedTuple

PLAIN_LOGIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
FLAGS: Final = ("required", "requisite", "sufficient", "optional")
USER_PREFIX: Final = "user_"


class JaasEntry(NamedTuple):
    login_module: str
    flag: str
    options: dict[str, str]


def _tokens(text: str) -> list[tuple[str, bool]]:
    """(token, quoted) pairs; `=` and `;` are tokens of their own."""
    found: list[tuple[str, bool]] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "=;":
            found.append((ch, False))
            i += 1
        elif ch == '"':
            value: list[str] = []
            i += 1
            while True:
                if i >= len(text):
                    raise ValueError("a quoted value is not closed")
                if text[i] == "\\" and i + 1 < len(text):
                    value.append(text[i + 1])
                    i += 2
                elif text[i] == '"':
                    i += 1
                    break
                else:
                    value.append(text[i])
                    i += 1
            found.append(("".join(value), True))
        else:
            start = i
            while i < len(text) and not text[i].isspace() and text[i] not in '=;"':
                i += 1
            found.append((text[start:i], False))
    return found


def parse_jaas(text: str) -> JaasEntry:
    """The one login module of a JAAS line; ValueError saying what is wrong (never a value)."""
    tokens = _tokens(text)
    if len(tokens) < 3 or tokens[0][1] or tokens[1][1]:
        raise ValueError("expected a login module class and a control flag")
    (module, _), (flag, _) = tokens[0], tokens[1]
    if flag.lower() not in FLAGS:
        raise ValueError(f"control flag {flag!r} is not one of {', '.join(FLAGS)}")
    options: dict[str, str] = {}
    rest = tokens[2:]
    while rest and rest[0] != (";", False):
        if len(rest) < 3 or rest[0][1] or rest[1] != ("=", False) or rest[2] == (";", False):
            raise ValueError("options must be name=value")
        name, value = rest[0][0], rest[2][0]
        if name in options:
            raise ValueError(f"option {name} is given twice")
        options[name] = value
        rest = rest[3:]
    if not rest:
        raise ValueError("the login module must end with ';'")
    if rest[1:]:
        raise ValueError("only one login module is allowed")
    return JaasEntry(module, flag.lower(), options)


def plain_users(text: str) -> dict[str, str]:
    """User name -> password, from a PlainLoginModule line; ValueError when it is not one."""
    entry = parse_jaas(text)
    if entry.login_module != PLAIN_LOGIN_MODULE:
        raise ValueError(f"login module {entry.login_module!r} is not {PLAIN_LOGIN_MODULE}")
    return {
        name.removeprefix(USER_PREFIX): password
        for name, password in entry.options.items()
        if name.startswith(USER_PREFIX) and len(name) > len(USER_PREFIX)
    }
