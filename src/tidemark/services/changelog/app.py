"""The changelog service as it runs: ``build(settings)`` wires its edge into a
:class:`~tidemark.chassis.app.ServiceApp` (``tidemark.services.run_service``)."""

from __future__ import annotations

from typing import Any

from tidemark.chassis.app import ServiceApp
from tidemark.services.changelog.edge import ChangelogEdge
from tidemark.services.changelog.settings import ChangelogServiceSettings

SETTINGS = ChangelogServiceSettings


def build(settings: ChangelogServiceSettings) -> ServiceApp:
    app = ServiceApp("changelog", settings)
    edge = ChangelogEdge(app, settings.changelog)
    topics = app.topics
    app.follow_log([topics.control, topics.checkpoint_events, topics.materializations],
                   edge.on_record, edge.on_caught_up)
    app.every(settings.changelog.truncation_interval_ms / 1000)(edge.tick)
    app.every(1.0)(edge.measure)

    @app.faust.page("/changelog")
    async def changelog_status(web: Any, request: Any) -> Any:
        return web.json(edge.status())

    return app
