"""The materializer service as it runs: ``build(settings)`` wires its edge into a
:class:`~tidemark.chassis.app.ServiceApp` (``tidemark.services.run_service``)."""

from __future__ import annotations

from tidemark.chassis.app import ServiceApp
from tidemark.config.settings import ConfigurationError
from tidemark.services.materializer.edge import MaterializerEdge
from tidemark.services.materializer.settings import MaterializerSettings
from tidemark.storage import CheckpointStorage, StorageError, open_storage

SETTINGS = MaterializerSettings


def open_checkpoint_storage(settings: MaterializerSettings) -> CheckpointStorage:
    """The configured checkpoint storage; ``ConfigurationError`` naming the key if unusable."""
    try:
        return open_storage(settings.resolved_storage_url)
    except (StorageError, ValueError, OSError) as exc:
        raise ConfigurationError([("TIDEMARK_CHECKPOINT_STORAGE_URL", str(exc))]) from None


def build(settings: MaterializerSettings) -> ServiceApp:
    storage = open_checkpoint_storage(settings)
    app = ServiceApp("materializer", settings)
    replicas = settings.resolved_state_dir / "materializer" / "replicas"
    edge = MaterializerEdge(app, settings.materialization, storage, replicas)
    topics = app.topics
    app.follow_log([topics.control, topics.checkpoint_events, topics.materializations],
                   edge.on_record, edge.on_caught_up)
    app.every(settings.materialization.tick_ms / 1000)(edge.tick)
    return app
