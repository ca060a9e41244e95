"""The checkpoint-store service as it runs: ``build(settings)`` wires its edge into a
:class:`~tidemark.chassis.app.ServiceApp` (``tidemark.services.run_service``)."""

from __future__ import annotations

from tidemark.chassis.app import ServiceApp
from tidemark.services.checkpoint_store.edge import CheckpointStoreEdge
from tidemark.services.checkpoint_store.settings import CheckpointStoreSettings

SETTINGS = CheckpointStoreSettings


def build(settings: CheckpointStoreSettings) -> ServiceApp:
    app = ServiceApp("checkpoint-store", settings)
    edge = CheckpointStoreEdge(app, settings.resolved_storage_url, settings.retained_checkpoints)
    app.follow_log([app.topics.checkpoint_events, app.topics.control], edge.on_record, edge.on_caught_up)
    return app
