"""Checkpoint-store service: makes completed checkpoints durable, applies retention, deletes
what nothing retained needs. Logic in :mod:`tidemark.checkpoint_store`; this is its edge."""

from __future__ import annotations

from tidemark.services.checkpoint_store.settings import CheckpointStoreSettings

SETTINGS = CheckpointStoreSettings
"""The service's settings class; the package imports nothing else, so every process can check its
environment against every process's settings without the services' framework
(:mod:`tidemark.config.environment`). The service itself: :mod:`.app`."""
