"""The heap backend (``"heap"``): state as Python objects; registered in the backend registry."""

from tidemark.state.heap.backend import HashMapStateBackend
from tidemark.state.backend_registry import BackendContext, register_backend


def _create(context: BackendContext) -> HashMapStateBackend:
    """The heap keeps no local files: ``context.local_dir`` is not used."""
    return HashMapStateBackend(context.key_groups, context.max_parallelism,
                               operator_id=context.operator_id, clock=context.clock)


register_backend("heap", _create)
