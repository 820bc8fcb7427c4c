"""The schema migrations are one list, declared once for SQLite and PostgreSQL, and a
released migration never changes: the statements each dialect applies for every released
version are pinned here by their SHA-256, so an edit of any of them (one character, or
whitespace: PostgreSQL keeps function bodies as text) fails this test. A new migration
gets its line in ``RELEASED`` when it is released.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from durable_rpc.store._dialects import DIALECTS, POSTGRES, SQLITE, Dialect
from durable_rpc.store._migrations import (
    MIGRATIONS,
    PG_MIGRATIONS,
    SQLITE_MIGRATIONS,
    Migration,
    in_dialect,
)

#: version -> SHA-256 of the statements SQLite applies, of those PostgreSQL applies.
RELEASED: dict[int, tuple[str, str]] = {
    1: (
        "d97325837758685bc750a81c8f4e52ac9023b519119113b8a78cf59b114d9a35",
        "e3bc40d120b4b2dbea478f3fb015a672348324a6a518f049f676f9a4e362af66",
    ),
    2: (
        "b54e5d55e62b9d47e43414d7369ba4519b3aa2bdd6e64e17efb5aed44fb007d2",
        "84cd63d637a07e72b20b7501fe6235b2e5232965f565f652d1a92dba0a1cb0d3",
    ),
    3: (
        "14a4bdb1c28c810e86c320200543c00953e023a20d89b83b258418a0426f3a46",
        "e8ea3e21c298dccdbb1358207622fa58b5516e8894e37c076070f714bc329798",
    ),
    4: (
        "8a58a3fed531eca6d770f2d813fcf3d5609e61379fde7330eb60c9f72ae80d4e",
        "94c53b43ba559d00ac181ab71c0fc37590f8b1439dee8de46127af4d7ff3ce50",
    ),
    5: (
        "9154f304e799e13f685e271b69aeffafd9542a34e926e8ef49846549e529df35",
        "df0f11b90bbb4970bbf690e1828afdedb4a6cff5b3aef71e1d0163178a80f0bb",
    ),
    6: (
        "acbe1cda2b90597dd106487adb82b12f047246407b6937d8b151f1ba886cef4a",
        "acbe1cda2b90597dd106487adb82b12f047246407b6937d8b151f1ba886cef4a",
    ),
    7: (
        "26f698e246ac3e941f2906c93e73f82c7ca2446de4abfe89965b7be2e1356cbf",
        "269f864dcf5bdfac0352a048209c1d247191b84edafa37e6598f0ac37256865b",
    ),
    8: (
        "098f894834ca8bed6c20418bf33af5dc5d95960df4ef2119b85b01e761e28bfd",
        "b75da1971a853c49a2513fe8242add4a6a0ef8058e31a6411e49771c7b470d13",
    ),
    9: (
        "1dc1b88e769f60352658de5d7c2c4bc3938d802286255f5840a6acc0bc209006",
        "95302192850f4fe44ee38b58d2ef2010548df13c12ae3c88157e481eccfbf25c",
    ),
    10: (
        "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945",
        "f475f97e6f33ca5fff211c33e4b0b812fa241175b10ed7a8f5f42f1b440b7dcd",
    ),
    11: (
        "07c63987f4ebb9d2fc12f2af17bfdc66c85076a02c30dcdd251fa781b4739fe7",
        "45936ef210b9d745d7b26e009541209c8b09dc68e66beb25554b7ef4a3f0745f",
    ),
    12: (
        "b481e87d1e1932716fa17f187a6a9dfab272d2af31d658e4b1329bc0c5df4a9f",
        "8ed0091e67a88cf2c27949a8ffe7e1f00e0fb5dc5abf5c9e43b0414af8a9ced1",
    ),
    13: (
        "fe4f01a2db73fd26076d31d6456c8767fbc1ab5c0dd07731fc8e520dd6c3d723",
        "fe4f01a2db73fd26076d31d6456c8767fbc1ab5c0dd07731fc8e520dd6c3d723",
    ),
    14: (
        "09d04c240420957ca3cb5b10c10fa9365b906e5804612462363d6b5105fba877",
        "cefe02b5a7b6fe95b3b053bf616e05e40a5582bcff0c7065c7a72820a2c059c6",
    ),
    15: (
        "8c97d284ded1dd0396f8c0c32c240385c814c6dbf0ec408dfc85b896b8d8f704",
        "66e744921c4f9e49d3175a4e668c554e864f9fad44c3536ad0b75d65cdf576ba",
    ),
    16: (
        "7de5793abbb43f7314298f09b5531ef9012a478e3a32479355af35705e4daf6d",
        "b4d54ee568cc273af36db0d7dada66e578eb1ee30b1a64aefb712e742918ebd4",
    ),
    17: (
        "e928b7268fe9aa992449176ca0f9b4c2bf8be38381a081d14a810ef9c9bdd1fb",
        "8ff236b8efd50013b62497cd6b89c7f341d5797f630b8d6963454bc3177130d8",
    ),
    18: (
        "9c25a9bc1fd9788452ba0760351936e493d294bdcf14e3292c5cf716dfb8fc3e",
        "acaf10071d4e4535585c8f7b061fbc3100b57d2ddf1eb57b4f567d0c673640ab",
    ),
    19: (
        "da1d3c4d08b9692cb134d253a688c6819fd8e634fed9b7e168787fb1eb35ae94",
        "da1d3c4d08b9692cb134d253a688c6819fd8e634fed9b7e168787fb1eb35ae94",
    ),
    20: (
        "3c49d5353d96814ea46520066f89de994c0bfc536f054807e81ebcc72a027177",
        "05daf4e5863470c2c17bb1e7c9affd7e8659d28f702742d8aad43a72f2b40805",
    ),
    21: (
        "26f86878323e69e18f3225138eb82c86532cf4e17a3b14599e5334c0658f155b",
        "15cc116b5be9d3188b4564e9099027dd925b800c430732f34c67268152bc917d",
    ),
    22: (
        "661eef3c6784e76d0fcc756cd4dd0b4cd03b3fcd90d4f7d4ea1bee65e323f4b6",
        "6a5d48585f007117b6f978e5c96ed7a68354ee5f01384e66c97e05e374a40d7e",
    ),
    23: (
        "7a3f332902451a371008f2a80d6eccd09342905ec08b5e5e0713bf96932d2080",
        "7a3f332902451a371008f2a80d6eccd09342905ec08b5e5e0713bf96932d2080",
    ),
    24: (
        "9a0caf24ff75e98a96007853b363cfe195ae085db9c5586a81220d74c3c0f58b",
        "89dbfbed482e12cacf4516f4369ba5123c59a2336e00986be4fc3e4de2fe9519",
    ),
    25: (
        "448b1aa6a33d1bebbac0ddb3afd34cd4befb51e1199fda02d78e00d5ce9231dd",
        "1bd690c061094598745ab3cf63e1815dc68dacfc889ca9ebbc56c849168c0b5e",
    ),
    26: (
        "7555099e1774f3d3b3c76c45dcf61261a745e85b3f5015013a4c8acee6999ccc",
        "31b373825af16db30664a8b398a988937f7517b93568d87cdd5b56e506b3eec4",
    ),
    27: (
        "ac6c986cebe4e9668657f512065840b32dc6e24beb1c4a44ba3781e7c348f5fc",
        "ac6c986cebe4e9668657f512065840b32dc6e24beb1c4a44ba3781e7c348f5fc",
    ),
    28: (
        "63d2b59f4a45a44246599b53932a57976ae99c8a55630fad59809f2268a74486",
        "bedee0ef05deed1cc7eb87161c2542fc6af34f8fe4f864575fb7b191fb0276c8",
    ),
    29: (
        "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945",
        "e0d5b91f249d27d5f8b892bb1e3dd2e1e74bacb5037ae370d7334447cf5c0ff4",
    ),
    30: (
        "7c888bb878f72f73aa12e132df333712420a65acbf398a5fb6a85bd294c3fbd4",
        "4ee11f906bddc5da848bc0351fa8353a0bb7029daf6f2f698fbc922f7ba99dca",
    ),
}

#: Words of one dialect's types and functions that must never reach the other's
#: statements (a fragment that wrote a type instead of asking its dialect).
FOREIGN_WORDS: dict[str, tuple[str, ...]] = {
    SQLITE.name: ("BYTEA", "BIGINT", "DOUBLE PRECISION", "GENERATED", "plpgsql", "::"),
    POSTGRES.name: ("BLOB", "AUTOINCREMENT", "julianday", "json_each", " REAL"),
}


def fingerprint(statements: tuple[str, ...]) -> str:
    """SHA-256 of the statements, their boundaries included."""
    return hashlib.sha256(json.dumps(list(statements)).encode()).hexdigest()


def is_postgres_only(migration: Migration) -> bool:
    return all(not migration.schema(d) for d in DIALECTS) and bool(migration.postgres_only)


def test_versions_are_one_to_n_in_order_with_a_name_each() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    names = [m.name for m in MIGRATIONS]
    assert all(names) and len(set(names)) == len(names)


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_every_dialect_applies_every_version(dialect: Dialect) -> None:
    applied = in_dialect(dialect)
    assert [(m.version, m.name) for m in applied] == [(m.version, m.name) for m in MIGRATIONS]


def test_the_stores_read_the_one_list() -> None:
    assert in_dialect(SQLITE) == SQLITE_MIGRATIONS
    assert in_dialect(POSTGRES) == PG_MIGRATIONS


@pytest.mark.parametrize("migration", MIGRATIONS, ids=lambda m: str(m.version))
def test_a_migration_has_statements_for_both_dialects_unless_declared_postgres_only(
    migration: Migration,
) -> None:
    sqlite = migration.in_dialect(SQLITE).statements
    postgres = migration.in_dialect(POSTGRES).statements
    if is_postgres_only(migration):
        assert sqlite == ()
        assert postgres == migration.postgres_only
    else:
        assert sqlite == migration.schema(SQLITE) != ()
        assert postgres == (*migration.schema(POSTGRES), *migration.postgres_only) != ()


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_a_dialect_s_statements_use_none_of_the_other_s_words(dialect: Dialect) -> None:
    leaks = [
        (m.version, word)
        for m in in_dialect(dialect)
        for statement in m.statements
        for word in FOREIGN_WORDS[dialect.name]
        if word in statement
    ]
    assert leaks == []


def test_every_released_version_is_still_declared() -> None:
    assert set(RELEASED) <= {m.version for m in MIGRATIONS}


@pytest.mark.parametrize("version", sorted(RELEASED))
def test_a_released_migration_never_changes(version: int) -> None:
    migration = MIGRATIONS[version - 1]
    assert migration.version == version
    got = (
        fingerprint(migration.in_dialect(SQLITE).statements),
        fingerprint(migration.in_dialect(POSTGRES).statements),
    )
    assert got == RELEASED[version], (
        f"migration {version} ({migration.name}) differs from the released one: "
        "databases that applied it would not get the change; append a new migration instead"
    )
