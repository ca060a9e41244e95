"""The metadata view of checkpoints and savepoints: stages, tasks and key groups, handles and
their files, the named states with their kinds and serializers, changelog ranges, source positions."""

from __future__ import annotations

import json

from tidemark.admin.render import checkpoint_view_text
from tidemark.state_processor import inspect_checkpoint, open_source
from tidemark.testing.changelog import InMemoryChangelogTopic

from state_processor_stage import STAGE, harness, request


def test_a_savepoint_shows_each_task_its_key_groups_files_and_the_states_with_their_serializers() -> None:
    with harness("heap", 2) as h:
        h.process_all(request(i) for i in range(20))
        snapshot = h.snapshot()
    view = inspect_checkpoint(open_source(snapshot.storage, "profiles", checkpoint_id=1))
    assert (view.job, view.checkpoint_id, view.kind, view.path) == ("profiles", 1, "SAVEPOINT", snapshot.path)
    (stage,) = view.stages
    assert (stage.stage, stage.backend, stage.snapshot) == (STAGE, "heap", "full")
    assert [(t.key_group_start, t.key_group_end) for t in stage.tasks] == [(0, 63), (64, 127)]
    assert [[h.kind for h in t.handles] for t in stage.tasks] == [["keyed full", "operator"]] * 2
    assert all(f.size_bytes > 0 and not f.shared for t in stage.tasks for h in t.handles for f in h.files)
    kinds = {s.name: (s.kind, s.value_serializer, s.ttl_ms) for s in stage.keyed_states}
    assert kinds == {
        "_timers.event-time": ("timers", "tidemark.tagged.v1", None),
        "_timers.processing-time": ("timers", "tidemark.tagged.v1", None),
        "average_bytes": ("AGGREGATING", "tidemark.tagged.v1", None),
        "by_method": ("MAP", "tidemark.tagged.v1", None),
        "count": ("VALUE", "tidemark.tagged.v1", None),
        "last_seen": ("VALUE", "tidemark.tagged.v1", 3_600_000),
        "statuses": ("LIST", "tidemark.tagged.v1", None),
        "total_bytes": ("REDUCING", "tidemark.tagged.v1", None),
    }
    assert [(s.name, s.kind) for s in stage.operator_states] == [("seen", "SPLIT_DISTRIBUTE")]
    document = json.loads(json.dumps(view.to_document()))
    assert document["stages"][0]["tasks"][1]["key_group_start"] == 64
    text = checkpoint_view_text(view)
    assert "savepoint 1 of job profiles" in text and "stage profile: 2 tasks, full snapshot, backend heap" in text
    assert "last_seen" in text and "3600000 ms" in text


def test_an_incremental_checkpoint_shows_its_shared_files() -> None:
    with harness("rocksdb", 2) as h:
        h.process_all(request(i) for i in range(20))
        snapshot = h.snapshot(savepoint=False)
    view = inspect_checkpoint(open_source(snapshot.storage, "profiles", path=snapshot.path))
    (stage,) = view.stages
    assert (view.kind, stage.backend, stage.snapshot) == ("CHECKPOINT", "rocksdb", "incremental")
    assert all(t.shared_files > 0 and 0 < t.written_bytes <= t.size_bytes for t in stage.tasks)
    assert {"count", "by_method"} <= {s.name for s in stage.keyed_states}


def test_a_changelog_checkpoint_shows_its_ranges_and_says_where_its_states_are_recorded() -> None:
    topic = InMemoryChangelogTopic("profiles.changelog", partitions=2)
    with harness("heap", 2, topic) as h:
        h.process_all(request(i) for i in range(20))
        snapshot = h.snapshot(savepoint=False)
    (stage,) = inspect_checkpoint(open_source(snapshot.storage, "profiles", checkpoint_id=1)).stages
    assert stage.snapshot == "changelog" and stage.states_recorded_in == "changelog"
    assert all(t.changelog_ranges for t in stage.tasks)
    assert stage.keyed_states == ()
    assert "recorded in the changelog" in checkpoint_view_text(inspect_checkpoint(
        open_source(snapshot.storage, "profiles", checkpoint_id=1)))


def test_source_positions_show_in_the_view_and_read_as_rows() -> None:
    from dataclasses import replace

    from tidemark.checkpoint_store import encode_metadata, metadata_path
    from tidemark.protocol.messages import SourceOffset
    from tidemark.state_processor import StateReader

    with harness("heap", 2) as h:
        h.process(request(1))
        snapshot = h.snapshot()
    tasks = tuple(replace(t, source_offsets=(SourceOffset("access-log", t.subtask_index, 100 + t.subtask_index),))
                  for t in snapshot.metadata.tasks)
    metadata = replace(snapshot.metadata, checkpoint_id=5, tasks=tasks)
    snapshot.storage.write_bytes(metadata_path("profiles", 5, metadata.checkpoint_type), encode_metadata(metadata))
    reader = StateReader.open(snapshot.storage, "profiles", checkpoint_id=5)
    assert [r.to_json() for r in reader.source_positions()] == [
        {"stage": STAGE, "task": "profile#0", "topic": "access-log", "partition": 0, "offset": 100},
        {"stage": STAGE, "task": "profile#1", "topic": "access-log", "partition": 1, "offset": 101}]
    assert list(reader.source_positions("other")) == []
    text = checkpoint_view_text(inspect_checkpoint(reader.source))
    assert "NEXT OFFSET" in text and "access-log  1          101" in text
