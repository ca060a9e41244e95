"""The completed-checkpoint store: retention, shared-state reference counts, ``_metadata``
files on a ``CheckpointStorage``, and the event log its state is rebuilt from."""

from tidemark.checkpoint_store.store_event_log import (
    CheckpointEvent,
    CheckpointEventLog,
    InMemoryCheckpointEventLog,
)
from tidemark.checkpoint_store.layout import checkpoint_dir, metadata_path, shared_dir
from tidemark.checkpoint_store.metadata_codec import (
    MetadataFormatError,
    decode_metadata,
    encode_metadata,
)
from tidemark.checkpoint_store.persistent_store import PersistentCheckpointStore, read_metadata
from tidemark.checkpoint_store.shared_state_registry import SharedStateRegistry
from tidemark.checkpoint_store.store import (
    REJECTED_PREFIX,
    CheckpointStoreOptions,
    CompletedCheckpointStore,
    Discard,
    state_files,
)

__all__ = [
    "REJECTED_PREFIX",
    "CheckpointEvent",
    "CheckpointEventLog",
    "CheckpointStoreOptions",
    "CompletedCheckpointStore",
    "Discard",
    "InMemoryCheckpointEventLog",
    "MetadataFormatError",
    "PersistentCheckpointStore",
    "SharedStateRegistry",
    "checkpoint_dir",
    "decode_metadata",
    "encode_metadata",
    "metadata_path",
    "read_metadata",
    "shared_dir",
    "state_files",
]
