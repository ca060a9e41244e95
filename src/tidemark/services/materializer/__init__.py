"""Materializer service: folds each changelog task's completed checkpoints into a RocksDB replica
and, every materialization interval, writes it to checkpoint storage as a materialized snapshot
and announces it. Logic in :mod:`tidemark.materializer`; this package is its edge."""

from __future__ import annotations

from tidemark.services.materializer.settings import MaterializerSettings

SETTINGS = MaterializerSettings
"""The service's settings class; the package imports nothing else, so every process can check its
environment against every process's settings without the services' framework
(:mod:`tidemark.config.environment`). The service itself: :mod:`.app`."""
