"""Checking that a checkpoint or savepoint is whole before anything is restored from it.

``verify_checkpoint(storage, path)`` reads the ``_metadata`` file (its checksum is checked by
:mod:`tidemark.checkpoint_store.metadata_codec`) and then every state file it references, each
against the size and SHA-256 recorded when it was written (``storage.read_verified``). The
first problem raises :class:`CorruptCheckpoint`, which names the checkpoint, its ``_metadata``
and the damaged or missing file. Every file is read once in full, so this costs one read of the
checkpoint's state.
"""

from __future__ import annotations

import re

from tidemark.checkpoint_store.metadata_codec import MetadataFormatError
from tidemark.checkpoint_store.persistent_store import read_metadata
from tidemark.checkpoint_store.store import state_files
from tidemark.protocol.messages import CheckpointMetadata
from tidemark.storage.base import CheckpointStorage, CorruptStateFile

_ID = re.compile(r"/(?:chk|sp)-(\d+)/_metadata$")


class CorruptCheckpoint(Exception):
    """A checkpoint or savepoint that cannot be restored as it was written."""

    def __init__(self, checkpoint_id: int | None, metadata_path: str, file: str, problem: str) -> None:
        self.checkpoint_id = checkpoint_id
        self.metadata_path = metadata_path
        self.file = file
        self.problem = problem
        name = f"checkpoint {checkpoint_id}" if checkpoint_id is not None else metadata_path
        super().__init__(f"{name} is corrupted: {file}: {problem}")


def checkpoint_id_of(metadata_path: str) -> int | None:
    """The id in a layout path (``<job>/chk-<id>/_metadata``, ``.../sp-<id>/_metadata``)."""
    found = _ID.search(metadata_path)
    return int(found.group(1)) if found else None


def verify_checkpoint(storage: CheckpointStorage, metadata_path: str) -> CheckpointMetadata:
    """The metadata at ``metadata_path`` once it and every state file it names are verified."""
    checkpoint_id = checkpoint_id_of(metadata_path)
    try:
        metadata = read_metadata(storage, metadata_path)
    except FileNotFoundError:
        raise CorruptCheckpoint(checkpoint_id, metadata_path, metadata_path, "missing") from None
    except MetadataFormatError as exc:
        problem = str(exc).removeprefix(f"{metadata_path}: ")
        raise CorruptCheckpoint(checkpoint_id, metadata_path, metadata_path, problem) from None
    for ref in state_files(metadata):
        try:
            storage.read_verified(ref)
        except FileNotFoundError:
            raise CorruptCheckpoint(metadata.checkpoint_id, metadata_path, ref.path, "missing") from None
        except CorruptStateFile as exc:
            problem = str(exc).removeprefix(f"{ref.path}: ")
            raise CorruptCheckpoint(metadata.checkpoint_id, metadata_path, ref.path, problem) from None
    return metadata
