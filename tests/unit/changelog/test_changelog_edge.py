"""The changelog service's edge after its replay: ``GET /changelog`` says live only once the
truncation points are rebuilt (a restarted service is read as caught up by whoever asks)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from tidemark.config.settings import TidemarkSettings
from tidemark.kafka.topics import TopicNames
from tidemark.services.changelog.edge import ChangelogEdge
from tidemark.services.changelog.settings import ChangelogOptions


def test_the_status_turns_live_only_after_the_rebuilt_points_are_published() -> None:
    app = SimpleNamespace(settings=TidemarkSettings(), bootstrap="127.0.0.1:9", topics=TopicNames())
    edge = ChangelogEdge(app, ChangelogOptions())  # type: ignore[arg-type]
    seen_while_rebuilding = []

    def delete(behind):  # the physical truncation the rebuild ends with (on an executor thread)
        seen_while_rebuilding.append(edge.status()["live"])
        return set()

    edge.truncator.delete = delete  # type: ignore[method-assign]
    assert edge.status()["live"] is False
    asyncio.run(edge.on_caught_up())
    assert seen_while_rebuilding == [False]
    assert edge.status()["live"] is True
