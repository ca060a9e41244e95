"""What one task snapshot contributes to a changelog restore: the reader's name for a
:class:`~tidemark.state.backend.KeyedSnapshot` (key groups, materialized handles, ranges)."""

from __future__ import annotations

from tidemark.state.backend import KeyedSnapshot

ChangelogSource = KeyedSnapshot
