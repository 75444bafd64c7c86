"""The SQL stores' migrations, one `.sql` file each, as the literal texts databases ran.

A store's migrations are the files `migrations/<store>/V<n>__<What_it_does>.sql`, numbered from 1
without a gap, applied in order (`postgres_schema`, `sqlite_schema`). A released migration never
changes, not even by a byte (`tests/coordinator/test_migrations.py` pins the hash of its
statements): a database that ran it is never brought the new text, so an edit would only make
new databases differ from old ones. Hence no text is built from shared pieces, and a change of
schema is a new file after the last; so is a later version of a server-side function, which
replaces it (CREATE OR REPLACE).

A file is its statements in order, each ended by a `;` that ends a line outside a dollar-quoted
body (`$fn$ ... $fn$`). A statement is sent as it is written, from the line after the previous
statement's `;` to its own `;` (excluded): blank lines included, and the `--` comment lines that
open it left out.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Final

_FILE_NAME: Final = re.compile(r"V([1-9][0-9]*)__\w+\.sql")
_DOLLAR_QUOTE: Final = re.compile(r"\$[A-Za-z_]*\$")


def migrations(store: str) -> list[list[str]]:
    """The statements of each migration of `store` ("postgres", "sqlite"), first to last."""
    numbered: dict[int, list[str]] = {}
    for entry in (resources.files(__package__) / "migrations" / store).iterdir():
        name = _FILE_NAME.fullmatch(entry.name)
        if name is None or int(name[1]) in numbered:
            raise ValueError(f"{store} migration {entry.name!r}: not V<n>__<name>.sql, or n again")
        numbered[int(name[1])] = statements(entry.read_text(encoding="utf-8"))
    if sorted(numbered) != list(range(1, len(numbered) + 1)):
        raise ValueError(f"{store} migrations are not numbered 1 to {len(numbered)}")
    return [numbered[number] for number in range(1, len(numbered) + 1)]


def statements(text: str) -> list[str]:
    """The statements of one migration file, each as the database is sent it."""
    found = []
    lines: list[str] = []
    quote = None
    for line in text.splitlines(keepends=True):
        if not lines and line.startswith("--"):
            continue
        lines.append(line)
        for tag in _DOLLAR_QUOTE.findall(line):
            quote = tag if quote is None else None if tag == quote else quote
        if quote is None and line.rstrip("\n").endswith(";"):
            found.append("".join(lines).removesuffix("\n").removesuffix(";"))
            lines = []
    if "".join(lines).strip():
        raise ValueError(f"a migration file ends inside a statement: {''.join(lines)[:80]!r}")
    return found
