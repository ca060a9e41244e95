"""The four services, by the name ``tidemark service NAME`` takes, and the module that implements
each (it exposes ``SETTINGS`` and ``build``). Data only, so the configuration layer can check a
variable against every process's settings without importing the services package."""

from __future__ import annotations

SERVICES: dict[str, str] = {
    "coordinator": "tidemark.services.coordinator",
    "checkpoint-store": "tidemark.services.checkpoint_store",
    "changelog": "tidemark.services.changelog",
    "materializer": "tidemark.services.materializer",
}
