"""Unit: released migrations never change, not even by a byte.

A database that ran a migration never runs it again: an edited text would change new databases
only, and old and new ones would then differ without anyone noticing. Each migration of both
stores (one `.sql` file each, `sql_migrations`) is pinned here by the SHA-256 of its statements as
read from its file. A change of schema is a new migration, whose hash is added below when it is
released.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import pytest

from diskless.coordinator._backends import sql_migrations
from diskless.coordinator._backends.sql_rows import TIME_MARK

POSTGRES = {
    1: "714a6877d663e1001c44961170e4e7ec9debb1b808a0b8295cd3ca03d548d967",
    2: "6bcc4a23d8b0532da4b73a8ea335763acf796a590458d93cac33e7dc298ea8c5",
    3: "b1bab058f668966271ba0bba8d219aec38ef7d2870917d8895b83457cf52a764",
    4: "ce8f74d32479e0d5290ab5d2e53ca00bb07bf9056bc9c15882360d8b4d9a62d2",
    5: "61a5aa99c9ffbdc541dad22c3d81dfc146c1667c915f3c5ffdc697fdf978465b",
    6: "ee6387ef9019cad96ecd0fd73a5fe8f018acdae65cc8bee088c8f4220fe25273",
    7: "b22529de443d7736c7227be6d4034f3a3a8599ea91bfb598c46ba01be22abcc1",
    8: "22e52f33bfbaa7d1499674eda16f4fbb797e61fdcb7dd0d18deba0b655442fad",
    9: "29100fa257c25c2b988dc2b03b82a0cef0ebef9ece38321cdc61d7eee8d67389",
    10: "6be1bafa43264d7e6361605f0425bac13b577584de468a0bc6ac41fea56296ea",
    11: "96c4d43ef868ea6c1ee0800434ed838f8956d7426bfa438eb749f4b129de5299",
    12: "f8c6149d98c7566a5d95f34424bca798b39dff784f6bbd91e7c19bddfebea797",
    13: "fef833bdcfab515906a96be9e71ec9e25909de2e753c8c28d167e51b6fd9318e",
    14: "c360c51b388d61c8e398dd41c704120a37bcf75ef9cdd5b0f33625322a587d84",
    15: "0b8552785e1fefb6bed564860c82c86e6952d4bb1125696a276baa8ee7849fdf",
    16: "6b2731a1d12852cc2e8763d1837a3be068bc5058e755f1301a5bf7766d97cecc",
    17: "e101ca544c7f780d6151049b638ffebf6ea7b1831d362a772f9145ca0592db5a",
    18: "787db041038031556a72af9476bb7b3c29eb14eabf54a4b80059097e294f24a9",
    19: "b28ff0afed18f00f8faa1455c4e45f3109191ebdf444ace674fad09b513c6bed",
    20: "1aa3aedcda333ccf92af3abe1efa8926133f35425bdb8afd9731e1946d96975a",
    21: "9a22227d79d80c838bcdfb89e2b94631ecd95b9826afcb5d96990467bcdb664a",
}
SQLITE = {
    1: "846e1c0805c017ae3ebac1ebe3212ea75efb7a6f3596e588e9233b4cef4ab077",
    2: "4b70eae67e79e6e75e037604510f9a021f17bd9c65739e587e1e3650681a290f",
    3: "007db640b38a32b01b3a9850973249d73159909e0e953add7c375e3174c271db",
    4: "66b6ecbd86484bb27a42be951d52105cfd02fdb4420e994d1689ea07ecfe0b0e",
    5: "199836c81da07ac8546a3423cbfd4e301c0e000263ccc27bc1fca1ae9c2f6a88",
    6: "e243cddd41cac1afb661c17957f9ca287a354124f00ca1f07529d2e6c9ee8db7",
    7: "765d15cd5c00801f854c0edd13e158cee6b4a6af79523fe56f5f036d08d581ee",
    8: "b1bab058f668966271ba0bba8d219aec38ef7d2870917d8895b83457cf52a764",
    9: "b22529de443d7736c7227be6d4034f3a3a8599ea91bfb598c46ba01be22abcc1",
    10: "eb5b59a5db32a893d257236e1e67ab9747a9ba513877462e6b4bda9b2aaa8145",
    11: "cd7f25d94fa387f54049130c76ed1d1170017e6a38875021e29364f74a7d9865",
    12: "50c05c5d1f1c8492dad4721297615843b0c0c382073c8f11c623f9667992f95b",
    13: "35d31d7eacabbb897734ea7bd228362767a7574cab4f4b696a8ea1f4fb56db33",
    14: "0b8552785e1fefb6bed564860c82c86e6952d4bb1125696a276baa8ee7849fdf",
    15: "5fd9721c06dc5da6faedbee1799476b22755230ab951feb068669974d1336440",
    16: "e101ca544c7f780d6151049b638ffebf6ea7b1831d362a772f9145ca0592db5a",
    17: "9eb6996ea396ff78dec8e9ce3f2067ff692bd206fb12e9d497c5c968fb4a4ce8",
    18: "b05f8abedfcd78845e694a0ee596c5c8e4100b8966a330225c679285f2d1f25a",
    19: "3adcee0426a2856feb50d3146b02847fefc6dbab7627b6de4581386f6018a642",
    20: "68023eeb42ff652b0087688ed15e4a2e542a65461d2a88edd5a52252ad6ea438",
}


def _digest(statements: Sequence[str]) -> str:
    """The hash of a migration: each statement's UTF-8 bytes, each followed by a NUL."""
    digest = hashlib.sha256()
    for statement in statements:
        digest.update(statement.encode())
        digest.update(b"\0")
    return digest.hexdigest()


@pytest.mark.parametrize(
    ("store", "migrations", "pinned"),
    [
        ("postgres", sql_migrations.migrations("postgres"), POSTGRES),
        ("sqlite", sql_migrations.migrations("sqlite"), SQLITE),
    ],
)
def test_every_released_migration_is_the_text_databases_ran(
    store: str, migrations: Sequence[Sequence[str]], pinned: dict[int, str]
) -> None:
    found = {number: _digest(m) for number, m in enumerate(migrations, 1)}
    changed = {n: digest for n, digest in found.items() if n in pinned and digest != pinned[n]}
    assert not changed, f"released {store} migrations {sorted(changed)} were edited"
    assert sorted(found) == sorted(pinned), f"pin each new {store} migration's hash here"


@pytest.mark.parametrize("store", ["postgres", "sqlite"])
def test_the_time_mark_index_has_the_predicate_queries_repeat(store: str) -> None:
    """A query uses the partial index only if it repeats the index's predicate, `TIME_MARK`."""
    statements = [s for m in sql_migrations.migrations(store) for s in m]
    (index,) = [s for s in statements if "INDEX batches_time_marks" in s]
    assert index.endswith(f" WHERE {TIME_MARK}")


def test_a_statement_is_sent_as_written_up_to_its_semicolon() -> None:
    """Comment lines before a statement are left out; blank lines and the lines of a
    dollar-quoted body (whose own `;` end no statement) are kept, byte for byte."""
    text = (
        "-- what the migration does\n"
        "CREATE TABLE t (\n    a INTEGER\n);\n"
        "-- a comment on the next statement\n"
        "\nCREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $fn$\n"
        "BEGIN\n    RETURN 1;\nEND\n$fn$\n;\n"
        "DROP TABLE t;\n"
        "-- nothing after the last statement\n"
    )
    assert sql_migrations.statements(text) == [
        "CREATE TABLE t (\n    a INTEGER\n)",
        "\nCREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $fn$\n"
        "BEGIN\n    RETURN 1;\nEND\n$fn$\n",
        "DROP TABLE t",
    ]
    with pytest.raises(ValueError, match="ends inside a statement"):
        sql_migrations.statements("CREATE TABLE t (a INTEGER)\n")
