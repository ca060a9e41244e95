"""docs/guide/writing-a-job.md's state-evolution example, as written: version 1 of the job runs,
stops with a savepoint (or, with the changelog backend, dies after a checkpoint), and version 2
starts from it, on the heap, RocksDB and changelog backends; every old profile is readable with
the renamed field carried over and the new ones defaulted. An incompatible version 3 is refused
in one line."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from tidemark.state import DataclassSerializer, StateMigrationError, ValueStateDescriptor
from tidemark.testing import KeyedProcessFunctionHarness as Harness
from tidemark.testing.changelog import InMemoryChangelogTopic

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "guide" / "writing-a-job.md"
USERS = [f"user-{i}" for i in range(30)]


def _blocks() -> list[str]:
    text = GUIDE.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text[text.index("<!-- guide-state-evolution -->"):], flags=re.S)[:2]
    assert "last_url" in blocks[0] and "aliases" in blocks[1]
    return blocks


def _versions() -> tuple[dict, dict]:
    first, second = _blocks()
    return _module("guide_state_evolution_v1", first), _module("guide_state_evolution_v2", second)


def _module(name: str, code: str) -> dict:
    """``code`` run as the module ``name`` (a dataclass needs its module in ``sys.modules``)."""
    module = sys.modules[name] = types.ModuleType(name)
    exec(compile(code, f"{name} (docs/guide/writing-a-job.md)", "exec"), module.__dict__)  # noqa: S102 - the guide's
    return module.__dict__


def _harness(version: dict, backend: str, topic: InMemoryChangelogTopic | None) -> Harness:
    return Harness.for_function(version["TrackProfiles"], key_by=lambda value: value["user"], parallelism=2,
                                state_backend="rocksdb" if backend == "rocksdb" else "heap", changelog=topic)


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "changelog"])
def test_version_2_reads_every_profile_version_1_wrote(backend: str) -> None:
    v1, v2 = _versions()
    topic = InMemoryChangelogTopic("profiles.changelog", partitions=2) if backend == "changelog" else None
    first = _harness(v1, backend, topic).open()
    for n, user in enumerate(USERS * 2):
        first.process({"user": user, "url": f"/page/{n}"})
    if topic is None:
        saved = first.stop_with_savepoint()
    else:  # the checkpoint's state is in the changelog: replayed, then migrated
        saved = first.snapshot(savepoint=False)
        assert saved.metadata.tasks[0].changelog_ranges
        first.close()
    second = _harness(v2, backend, topic).restore(saved)
    with second:
        profile = ValueStateDescriptor("profile", serializer=DataclassSerializer(v2["Profile"]))
        for n, user in enumerate(USERS):
            assert second.state(profile, user).value() == v2["Profile"](visits=2, current_url=f"/page/{n + len(USERS)}")
        emitted = second.process({"user": USERS[0], "url": "/cart", "country": "nl"})
        assert [e.decoded() for e in emitted] == [{"user": USERS[0], "visits": 3, "countries": ["nl"]}]
        again = second.snapshot(savepoint=topic is None)
    third = _harness(v2, backend, topic).restore(again)  # version 2's own snapshot: as is
    with third:
        assert third.state(profile, USERS[0]).value() == v2["Profile"](3, "/cart", ["nl"], None)


def test_an_incompatible_version_is_refused_in_one_line() -> None:
    v1, _ = _versions()
    first = _harness(v1, "heap", None).open()
    first.process({"user": USERS[0], "url": "/a"})
    saved = first.stop_with_savepoint()
    v3 = _module("guide_state_evolution_v3", _blocks()[0].replace("visits: int = 0", "visits: str = ''"))
    with pytest.raises(StateMigrationError) as refused:
        _harness(v3, "heap", None).restore(saved).open()
    assert str(refused.value) == ("state 'profile' cannot be restored: its Avro schema cannot read the stored values: "
                                  "reader type: string not compatible with writer type: long (at /fields/0/type)")
