"""A snapshot file with one flipped byte is refused, naming the file."""

from __future__ import annotations

import pytest

from tidemark.state import ListStateDescriptor, OperatorStateBackend, ValueStateDescriptor
from tidemark.storage.base import CorruptStateFile


def flip_one_byte(storage, path: str, offset: int | None = None) -> None:
    target = storage.root / path
    data = bytearray(target.read_bytes())
    data[len(data) // 2 if offset is None else offset] ^= 0x01
    target.write_bytes(bytes(data))


def snapshot_some_state(backend, storage, checkpoint_id=1):
    state = backend.get_state(ValueStateDescriptor("v"))
    for key in range(2000):
        backend.set_current_key(key)
        state.update(key)
    return backend.snapshot(checkpoint_id, storage)


@pytest.mark.parametrize("kind", ["heap", "rocksdb"])
@pytest.mark.parametrize("which", ["first", "last"])
def test_flipped_byte_is_refused_with_the_file_name(new_backend, storage, kind, which) -> None:
    snapshot = snapshot_some_state(new_backend(kind=kind), storage)
    victim = snapshot.handles[0].files[0 if which == "first" else -1].path
    flip_one_byte(storage, victim)
    for target_kind in ("heap", "rocksdb", "changelog"):
        with pytest.raises(CorruptStateFile, match=victim):
            new_backend(kind=target_kind).restore([snapshot], storage)


def test_flipped_byte_in_operator_state_is_refused(storage) -> None:
    backend = OperatorStateBackend(operator_id="src")
    backend.get_list_state(ListStateDescriptor("offsets")).add_all(range(100))
    handles = backend.snapshot(1, storage)
    flip_one_byte(storage, handles[0].files[0].path, offset=10)
    with pytest.raises(CorruptStateFile, match="src/chk-1/op-0.tmos"):
        OperatorStateBackend(operator_id="src").restore(handles, storage)
