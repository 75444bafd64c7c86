"""Kafka's `ssl.principal.mapping.rules`: from a client certificate's distinguished name (RFC
2253, `_x500`) to the name in its principal `User:<name>`.

The rules are Kafka's, in its syntax: a comma-separated list, tried in order, of `DEFAULT` (the
name is the whole DN) and `RULE:pattern/replacement/` with an optional `L` or `U` after the last
slash (lower or upper case the result); `\\` escapes a `/` or a `\\` in a pattern or a
replacement, and a comma inside a rule's pattern belongs to the rule. A rule applies when its
pattern matches the whole DN; the result is then every match replaced (`$1` for a group, as Java
writes it). A DN that no rule applies to cannot authenticate: the connection is closed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final, NamedTuple

_RULE: Final = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER: Final = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_PARSER: Final = re.compile(_RULE)
_GROUP: Final = re.compile(r"\\(.)|\$(\d+)")


class Rule(NamedTuple):
    pattern: re.Pattern[str] | None
    """None: DEFAULT."""
    replacement: str
    case: str
    """"", "L" or "U"."""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(self._expand, dn)
        return (
            result.lower() if self.case == "L" else result.upper() if self.case == "U" else result
        )

    def _expand(self, match: re.Match[str]) -> str:
        def one(part: re.Match[str]) -> str:
            if part.group(1) is not None:
                return part.group(1)
            return match.group(int(part.group(2))) or ""

        return _GROUP.sub(one, self.replacement)


def parse_rules(text: str) -> tuple[Rule, ...]:
    """The rules of `ssl.principal.mapping.rules`; ValueError naming the property."""
    rules = []
    for found in _SPLITTER.finditer(text.strip()):
        rule = found.group(1)
        if not rule:
            continue  # what follows the last comma
        parsed = _PARSER.match(rule)
        assert parsed is not None  # its last alternative matches anything
        if parsed.group(1) is not None:
            rules.append(Rule(None, "", ""))
        elif parsed.group(2) is not None:
            try:
                pattern = re.compile(parsed.group(2))
            except re.error as error:
                raise ValueError(
                    f"ssl.principal.mapping.rules: invalid pattern in {rule!r}: {error}"
                ) from None
            rules.append(Rule(pattern, parsed.group(3), parsed.group(4)))
        else:
            raise ValueError(f"ssl.principal.mapping.rules: invalid rule {rule!r}")
    if not rules:
        raise ValueError("ssl.principal.mapping.rules: no rule")
    return tuple(rules)


def map_name(rules: Sequence[Rule], dn: str) -> str | None:
    """The principal name of `dn` by the first rule that applies; None when none does."""
    for rule in rules:
        name = rule.apply(dn)
        if name is not None:
            return name
    return None
