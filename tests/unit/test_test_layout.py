"""The suite's own layout: every test module has a name of its own. The tests are imported by
their file's name (``tests/`` is not a package), so two files of one name in different folders
pass alone and fail the collection of the whole run ("import file mismatch")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_name_is_unique() -> None:
    names = Counter(path.name for path in TESTS.rglob("*.py") if "__pycache__" not in path.parts)
    clashes = sorted(name for name, count in names.items() if count > 1 and name != "conftest.py")
    assert clashes == [], {name: sorted(str(p.relative_to(TESTS)) for p in TESTS.rglob(name)) for name in clashes}
