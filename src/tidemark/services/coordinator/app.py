"""The coordinator service as it runs: ``build(settings)`` wires its edge into a
:class:`~tidemark.chassis.app.ServiceApp` (``tidemark.services.run_service``)."""

from __future__ import annotations

from tidemark.chassis.app import ServiceApp
from tidemark.services.coordinator.checkpoints_page import install_checkpoints_page
from tidemark.services.coordinator.edge import CoordinatorEdge
from tidemark.services.coordinator.periodic_savepoints import PeriodicSavepoints
from tidemark.services.coordinator.rest_api import install_api
from tidemark.services.coordinator.runs import LocalLauncher
from tidemark.services.coordinator.settings import CoordinatorSettings
from tidemark.services.coordinator.state_queries import StateQueries

SETTINGS = CoordinatorSettings


def build(settings: CoordinatorSettings) -> ServiceApp:
    app = ServiceApp("coordinator", settings)
    edge = CoordinatorEdge(app, settings.checkpoint.options(), silence_ms=settings.supervisor_silence_ms)
    reader = app.follow_log([app.topics.control, app.topics.acks, app.topics.checkpoint_events, app.topics.heartbeats],
                            edge.on_record, edge.on_caught_up, confirm_delivery=True)
    edge.watch_delivery(lambda: reader.delivered_at_ms)
    app.every(settings.tick_interval_ms / 1000)(edge.tick)
    launcher = None
    if settings.jobs.launcher == "local":
        launcher = LocalLauncher(settings, app.bootstrap)
        app.every(1.0)(launcher.reap_periodically)  # runs outlive the coordinator (see runs.py)
    api = install_api(app, edge, settings.api_token, settings.resolved_storage_url,
                      launcher=launcher, job_catalog=settings.jobs.catalog, queries=StateQueries(app))
    savepoints = PeriodicSavepoints(edge, api.storage, settings.savepoints.policy())
    app.every(1.0)(savepoints.tick)
    install_checkpoints_page(app)
    return app
