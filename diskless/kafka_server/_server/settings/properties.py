"""Java's `.properties` format, as Kafka reads `server.properties` (`java.util.Properties.load`).

The rules kept: a line whose first non-blank character is `#` or `!` is a comment; a key ends
at the first unescaped `=`, `:` or blank, and blanks around that separator are skipped; a line
ending in an odd number of backslashes continues on the next, whose leading blanks are dropped;
`\\t`, `\\n`, `\\r`, `\\f`, `\\uXXXX` are escapes, and a backslash before any other character is
that character. A later duplicate key wins. The file is read as ISO 8859-1, as Kafka reads it
(`Properties.load` of a byte stream): other characters are written as `\\uXXXX`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

_BLANKS: Final = " \t\f"
_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """A malformed line (a `\\u` escape without four hex digits); the message names the line."""


def read_properties(path: Path) -> dict[str, str]:
    return parse_properties(path.read_bytes().decode("latin-1"), str(path))


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """The properties of `text`, in file order (later duplicates win)."""
    found: dict[str, str] = {}
    for number, logical in _logical_lines(text):
        key, value = _split(logical)
        try:
            found[_unescape(key)] = _unescape(value)
        except PropertiesError as error:
            raise PropertiesError(f"{source}:{number}: {error}") from None
    return found


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, joined text) of each non-blank, non-comment logical line."""
    lines: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip(_BLANKS)
        if not pending:
            if not line or line[0] in "#!":
                continue
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # continues: drop the backslash, join the next line's text
            pending.append(line[:-1])
            continue
        pending.append(line)
        lines.append((start, "".join(pending)))
        pending = []
    if pending:  # a continuation at the end of the file ends the line there
        lines.append((start, "".join(pending)))
    return lines


def _split(line: str) -> tuple[str, str]:
    """Key and (still escaped) value of a logical line."""
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char in "=:" or char in _BLANKS:
            break
        index += 1
    key, rest = line[:index], line[index:]
    rest = rest.lstrip(_BLANKS)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANKS)
    return key, rest


def _unescape(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char != "\\" or index + 1 == len(text):
            out.append(char)
            index += 1
            continue
        escaped = text[index + 1]
        if escaped == "u":
            digits = text[index + 2 : index + 6]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise PropertiesError(f"malformed \\uXXXX escape {text[index : index + 6]!r}")
            out.append(chr(int(digits, 16)))
            index += 6
            continue
        out.append(_ESCAPES.get(escaped, escaped))
        index += 2
    return "".join(out)
