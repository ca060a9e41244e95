"""Changelog service: owns the state changelog topics, tracks which of their ranges retained
checkpoints, savepoints and materializations need, and truncates the rest. Logic in
:mod:`tidemark.changelog.truncation`; this package is its edge (Kafka in and out, metrics)."""

from __future__ import annotations

from tidemark.services.changelog.settings import ChangelogServiceSettings

SETTINGS = ChangelogServiceSettings
"""The service's settings class; the package imports nothing else, so every process can check its
environment against every process's settings without the services' framework
(:mod:`tidemark.config.environment`). The service itself: :mod:`.app`."""
