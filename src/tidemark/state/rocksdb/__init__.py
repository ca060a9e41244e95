"""The RocksDB backend (``"rocksdb"``) and the reader of its incremental handles, registered
in the backend registry."""

from tidemark.protocol.messages import StateHandleKind
from tidemark.state.backend_registry import BackendContext, register_backend, register_handle_reader
from tidemark.state.rocksdb.backend import RocksDBStateBackend
from tidemark.state.rocksdb.options import RocksDBSetup
from tidemark.state.rocksdb.snapshot import read_incremental


def _create(context: BackendContext) -> RocksDBStateBackend:
    """A RocksDB working copy under ``context.local_dir`` (required), built with the context's
    :class:`~tidemark.state.rocksdb.options.RocksDBSetup` (default options, its own memory, without)."""
    if context.local_dir is None:
        raise ValueError("the rocksdb backend needs a local directory")
    setup = context.backend_options if isinstance(context.backend_options, RocksDBSetup) else RocksDBSetup()
    return RocksDBStateBackend(context.local_dir, context.key_groups, context.max_parallelism,
                               operator_id=context.operator_id, clock=context.clock, options=setup.options,
                               memory=setup.memory, options_factory=setup.options_factory)


register_backend("rocksdb", _create)
register_handle_reader(StateHandleKind.KEYED_INCREMENTAL, read_incremental)
