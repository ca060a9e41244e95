"""The changelog backend: wraps heap or RocksDB and logs every change to a changelog topic.

Importing this package registers the wrapper for :class:`ChangelogWiring` in
:mod:`tidemark.state.backend_registry`; the writer and reader it uses are :mod:`tidemark.changelog`'s.
"""

from tidemark.changelog.backend.wrapper import ChangelogStateBackend, ChangelogWiring
from tidemark.changelog.backend.restore import RestoreResult, is_shareable, restore_from_changelog
from tidemark.state.backend_registry import register_wrapper

register_wrapper(ChangelogWiring, ChangelogStateBackend.wrap)

__all__ = [
    "ChangelogStateBackend",
    "ChangelogWiring",
    "RestoreResult",
    "is_shareable",
    "restore_from_changelog",
]
