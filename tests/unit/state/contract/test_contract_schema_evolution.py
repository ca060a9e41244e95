"""Schema evolution on restore, on every backend: Avro and dataclass state whose schema changed
between the snapshot and the registration is migrated once (a field added with a default, one
removed, one renamed through an alias, a numeric promotion), keeps evolving across later
snapshots and changelog replays, and an incompatible change is refused in one line."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from tidemark.state import (
    AvroSerializer,
    DataclassSerializer,
    KeyGroupRange,
    ListStateDescriptor,
    MapStateDescriptor,
    StateMigrationError,
    StateTtlConfig,
    ValueStateDescriptor,
    assign_to_key_group,
)
from tidemark.types import CheckpointId

KEYS = [f"user-{i}" for i in range(40)]


def _avro(*fields: dict) -> AvroSerializer:
    return AvroSerializer({"type": "record", "name": "Visits", "fields": list(fields)})


V1 = _avro({"name": "url", "type": "string"}, {"name": "hits", "type": "int"})
V2 = _avro({"name": "url", "type": "string"}, {"name": "hits", "type": "long"},  # int -> long
           {"name": "country", "type": "string", "default": "unknown"})


@dataclass
class Session:
    user: str
    clicks: int
    pages: list[str] = field(default_factory=list)


@dataclass
class SessionV2:  # the class as the job's next version declares it (same record name below)
    visitor: str = field(metadata={"aliases": ["user"]})  # renamed
    clicks: int  # no default: present in every stored value
    # "pages" removed
    duration_s: float = 0.0  # added with a default
    referrer: str | None = None


SessionV2.__name__ = "Session"


def _write(backend, descriptor, values) -> None:
    state = backend.get_state(descriptor)
    for key in KEYS:
        backend.set_current_key(key)
        values(state, key)


def _restored(new_backend, storage, snapshots, **kwargs):
    backend = new_backend(**kwargs)
    backend.restore(snapshots, storage)
    return backend


def test_an_avro_value_state_gains_a_defaulted_field_and_a_promotion(new_backend, storage) -> None:
    source = new_backend()
    _write(source, ValueStateDescriptor("visits", serializer=V1), lambda s, k: s.update({"url": k, "hits": 3}))
    target = _restored(new_backend, storage, [source.snapshot(CheckpointId(1), storage)])
    visits = target.get_state(ValueStateDescriptor("visits", serializer=V2))
    for key in KEYS:
        target.set_current_key(key)
        assert visits.value() == {"url": key, "hits": 3, "country": "unknown"}
    target.set_current_key(KEYS[0])
    visits.update({"url": KEYS[0], "hits": 2**40, "country": "nl"})  # a long now
    final = _restored(new_backend, storage, [target.snapshot(CheckpointId(2), storage)])
    again = final.get_state(ValueStateDescriptor("visits", serializer=V2))  # as is: version 1 both
    final.set_current_key(KEYS[0])
    assert again.value() == {"url": KEYS[0], "hits": 2**40, "country": "nl"}
    final.set_current_key(KEYS[1])
    assert again.value() == {"url": KEYS[1], "hits": 3, "country": "unknown"}


def test_dataclass_state_evolves_in_values_lists_and_maps_with_ttl(new_backend, storage, clock) -> None:
    ttl = StateTtlConfig(ttl_seconds=3600)
    old, new = DataclassSerializer(Session), DataclassSerializer(SessionV2)
    source = new_backend()
    _write(source, ValueStateDescriptor("last", serializer=old, ttl=ttl),
           lambda s, k: s.update(Session(k, 1, ["/a", "/b"])))
    _write(source, ListStateDescriptor("history", serializer=old), lambda s, k: s.add_all([Session(k, 1), Session(k, 2)]))
    _write(source, MapStateDescriptor("by_day", value_serializer=old), lambda s, k: s.put("mon", Session(k, 7)))
    target = _restored(new_backend, storage, [source.snapshot(CheckpointId(1), storage)])
    last = target.get_state(ValueStateDescriptor("last", serializer=new, ttl=ttl))
    history = target.get_state(ListStateDescriptor("history", serializer=new))
    by_day = target.get_state(MapStateDescriptor("by_day", value_serializer=new))
    for key in KEYS:
        target.set_current_key(key)
        assert last.value() == SessionV2(visitor=key, clicks=1)
        assert history.get() == [SessionV2(key, 1), SessionV2(key, 2)]
        assert by_day.get("mon") == SessionV2(key, 7)
    target.set_current_key(KEYS[0])
    history.add(SessionV2(KEYS[0], 3, duration_s=1.5, referrer="ads"))
    final = _restored(new_backend, storage, [target.snapshot(CheckpointId(2), storage)])
    final.set_current_key(KEYS[0])
    assert final.get_state(ListStateDescriptor("history", serializer=new)).get()[-1] == \
        SessionV2(KEYS[0], 3, duration_s=1.5, referrer="ads")
    clock.advance(3_600_001)  # the TTL timestamps survived the migration
    assert final.get_state(ValueStateDescriptor("last", serializer=new, ttl=ttl)).value() is None


def test_an_incompatible_change_is_refused_in_one_line_naming_the_state(new_backend, storage) -> None:
    source = new_backend()
    _write(source, ValueStateDescriptor("visits", serializer=V1), lambda s, k: s.update({"url": k, "hits": 3}))
    snapshot = source.snapshot(CheckpointId(1), storage)
    changed_type = _avro({"name": "url", "type": "long"}, {"name": "hits", "type": "int"})
    no_default = _avro({"name": "url", "type": "string"}, {"name": "hits", "type": "int"},
                       {"name": "country", "type": "string"})
    for serializer, why in ((changed_type, "reader type: long not compatible with writer type: string"),
                            (no_default, "country"), (None, "its serializer changed from avro.binary.v1 to "
                                                              "tidemark.tagged.v1")):
        target = _restored(new_backend, storage, [snapshot])
        with pytest.raises(StateMigrationError) as refused:
            target.get_state(ValueStateDescriptor("visits", serializer=serializer))
        message = str(refused.value)
        assert "\n" not in message and message.startswith("state 'visits' cannot be restored: ") and why in message


def test_a_restore_meeting_both_schemas_moves_the_older_bytes_forward(new_backend, storage) -> None:
    """A rescale from tasks snapshotted on either side of a migration: the half restored from
    the older snapshot is migrated, whichever comes first."""
    left, right = KeyGroupRange(0, 63), KeyGroupRange(64, 127)
    before = new_backend(key_groups=right)
    after_source = new_backend(key_groups=left)
    for backend in (before, after_source):
        state = backend.get_state(ValueStateDescriptor("visits", serializer=V1))
        for key in KEYS:
            if assign_to_key_group(key, 128) in backend.key_group_range:
                backend.set_current_key(key)
                state.update({"url": key, "hits": 1})
    migrated = _restored(new_backend, storage, [after_source.snapshot(CheckpointId(1), storage)], key_groups=left)
    migrated.get_state(ValueStateDescriptor("visits", serializer=V2))
    snapshots = [migrated.snapshot(CheckpointId(2), storage), before.snapshot(CheckpointId(2), storage)]
    for order in (snapshots, snapshots[::-1]):
        whole = _restored(new_backend, storage, order)
        visits = whole.get_state(ValueStateDescriptor("visits", serializer=V2))
        for key in KEYS:
            whole.set_current_key(key)
            assert visits.value() == {"url": key, "hits": 1, "country": "unknown"}, key


def test_snapshots_record_the_schema_and_its_version(new_backend, storage) -> None:
    source = new_backend()
    _write(source, ValueStateDescriptor("visits", serializer=V1), lambda s, k: s.update({"url": k, "hits": 3}))
    target = _restored(new_backend, storage, [source.snapshot(CheckpointId(1), storage)])
    target.get_state(ValueStateDescriptor("visits", serializer=V2))
    meta = target.registration_meta(ValueStateDescriptor("visits", serializer=V2))
    assert meta["schema_version"] == 1
    assert json.loads(meta["value_serializer"]["config"]["schema"])["fields"][2]["name"] == "country"


def test_a_changed_ttl_duration_needs_no_migration_and_later_restores_accept_both(new_backend, storage) -> None:
    """The stored bytes are the same: a checkpoint after the change (a changelog holding both
    definitions, on the changelog backend) restores."""
    source = new_backend()
    _write(source, ValueStateDescriptor("v", ttl=StateTtlConfig(60)), lambda s, k: s.update(1))
    middle = _restored(new_backend, storage, [source.snapshot(CheckpointId(1), storage)])
    longer = ValueStateDescriptor("v", ttl=StateTtlConfig(120))
    _write(middle, longer, lambda s, k: s.update(s.value() + 1))
    assert "schema_version" not in middle.registration_meta(longer)
    final = _restored(new_backend, storage, [middle.snapshot(CheckpointId(2), storage)])
    state = final.get_state(longer)
    final.set_current_key(KEYS[3])
    assert state.value() == 2
