"""Which ``TIDEMARK_*`` environment variables a process accepts, and what an unknown one is.

pydantic-settings reads only the environment variables that name a field, so a misspelled one
(``TIDEMARK_CHEKPOINT__INTERVAL_MS``) would be ignored without a word. :func:`unknown_variables`
finds every ``TIDEMARK_*`` variable that is none of:

* a setting of the process's settings class: ``TIDEMARK_<FIELD>``, or ``TIDEMARK_<FIELD>__<KEY>``
  for a field that is a model (``TIDEMARK_KAFKA__SECURITY_PROTOCOL``);
* a setting of another Tidemark process (a service's settings class, see
  :data:`tidemark.config.service_modules.SERVICES`): one environment may serve every process, as
  ``docker-compose.yml``'s shared block and :class:`tidemark.local.pipeline.LocalPipeline` do;
  such a variable is accepted and means nothing to this process;
* one of :data:`NOT_SETTINGS`, the variables read outside the settings classes.

Each unknown variable is reported with the closest valid name (``difflib``), if one is close.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable, Mapping

from pydantic import BaseModel

from tidemark.config.service_modules import SERVICES

PREFIX = "TIDEMARK_"

NOT_SETTINGS: frozenset[str] = frozenset({
    "TIDEMARK_CONFIG_FILE",  # tidemark.config.settings: the YAML file itself
    "TIDEMARK_SCHEMAS_DIR",  # tidemark.protocol.schemas: the Avro schema catalog
    "TIDEMARK_CACHE_DIR",  # tidemark.maven: the jar cache (the embedded broker, Spark's Kafka connector)
    "TIDEMARK_FAULT",  # tidemark.runtime.job.faults: fault injection in a stage worker
    "TIDEMARK_COORDINATOR_URL",  # CLI option --url of the job and operator commands
    "TIDEMARK_WORKER_INDEX",  # CLI option --worker of `tidemark jobs host` (a StatefulSet pod's index)
    "TIDEMARK_S3__ENDPOINT_URL",  # tidemark.storage.s3
    "TIDEMARK_S3__ADDRESSING_STYLE",  # tidemark.storage.s3
})
"""``TIDEMARK_*`` variables that are not settings but are read elsewhere in Tidemark."""


def setting_variables(settings_cls: type[BaseModel]) -> frozenset[str]:
    """Every ``TIDEMARK_*`` environment variable ``settings_cls`` reads (upper case)."""
    names: set[str] = set()
    for name, field in settings_cls.model_fields.items():
        if field.validation_alias is not None:  # e.g. bootstrap_servers <- KAFKA_BOOTSTRAP_SERVERS
            continue
        variable = PREFIX + name.upper()
        names.add(variable)
        nested = field.annotation
        if isinstance(nested, type) and issubclass(nested, BaseModel):
            names.update(f"{variable}__{sub.upper()}" for sub in nested.model_fields)
    return frozenset(names)


def _other_processes() -> Iterable[type[BaseModel]]:
    """The settings classes of the services (their packages import nothing else: not the services' framework)."""
    for module in SERVICES.values():
        yield importlib.import_module(module).SETTINGS


def unknown_variables(settings_cls: type[BaseModel], environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(variable, reason)`` for every ``TIDEMARK_*`` variable in ``environ`` that names no setting
    of any Tidemark process and is not in :data:`NOT_SETTINGS`; empty when all are known."""
    own = setting_variables(settings_cls) | NOT_SETTINGS
    candidates = sorted(key for key in environ if key.upper().startswith(PREFIX) and key.upper() not in own)
    if not candidates:
        return []
    known = set(own)
    for other in _other_processes():
        known |= setting_variables(other)
    problems = []
    for key in candidates:
        if key.upper() in known:
            continue
        close = difflib.get_close_matches(key.upper()[len(PREFIX):], sorted(k[len(PREFIX):] for k in known),
                                          n=1, cutoff=0.7)  # the common prefix would make everything close
        hint = (f"; did you mean {PREFIX}{close[0]}?" if close
                else "; see the configuration reference in docs/operations.md")
        problems.append((key, f"not a Tidemark setting{hint}"))
    return problems
