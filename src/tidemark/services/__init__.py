"""The four services. Each package exposes ``SETTINGS`` (its settings class, importing nothing
else) and its ``app`` module ``build(settings) -> ServiceApp`` (with ``SETTINGS`` again);
:func:`run_service` is the one way to run any of them."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from tidemark.exit_codes import EXIT_CONFIG, EXIT_REFUSED
from tidemark.config.service_modules import SERVICES, SERVICES_EXTRA_MODULES, missing_extra_message
from tidemark.config.settings import ConfigurationError, load_settings
from tidemark.chassis.logs import configure_logging


class MissingExtraError(ImportError):
    """The services' framework is not installed (``pip install 'tidemark[services]'``)."""


def service_module(name: str) -> ModuleType:
    """The service ``name`` as it runs: its package's ``app`` module (``SETTINGS`` and ``build``)."""
    if name not in SERVICES:
        raise ValueError(f"unknown service {name!r}; expected one of: {', '.join(SERVICES)}")
    try:
        return importlib.import_module(SERVICES[name] + ".app")
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in SERVICES_EXTRA_MODULES:
            raise
        raise MissingExtraError(missing_extra_message(f"the {name} service", missing)) from exc


def run_service(name: str) -> None:
    """Read config, wire, run. Exits 78 naming the key on invalid configuration, 3 naming the
    extra when the services' framework is not installed."""
    try:
        module = service_module(name)
    except MissingExtraError as exc:  # one line on stderr, no traceback
        print(f"tidemark {name}: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_REFUSED) from None
    try:
        settings = load_settings(module.SETTINGS)
        configure_logging(settings.log_level, service=name)
        app = module.build(settings)
    except ConfigurationError as exc:  # one line on stderr, no traceback and no log record
        print(f"tidemark {name}: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None
    app.run()
