"""Coordinator service: triggers checkpoints and savepoints, collects acks, completes or aborts.

The decisions are :class:`tidemark.checkpoint.CheckpointCoordinator`'s (pure); this package is
its edge: settings, Kafka in and out (:mod:`.edge`), Prometheus metrics (:mod:`.metrics`), the
operator HTTP API (:mod:`.rest_api`) with its live state queries (:mod:`.state_queries`), periodic savepoints and their history (:mod:`.periodic_savepoints`), the checkpoints page in the browser (:mod:`.checkpoints_page`),
and the job runs it starts for that API (:mod:`.runs`).
"""

from __future__ import annotations

from tidemark.services.coordinator.settings import CoordinatorSettings

SETTINGS = CoordinatorSettings
"""The service's settings class; the package imports nothing else, so every process can check its
environment against every process's settings without the services' framework
(:mod:`tidemark.config.environment`). The service itself: :mod:`.app`."""
