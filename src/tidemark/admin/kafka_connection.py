"""How the commands that talk to Kafka directly (``topics``, ``generate``, ``verify``) find it and
fail: the broker every Tidemark process uses (``KAFKA_BOOTSTRAP_SERVERS``, else the embedded
broker running under ``TIDEMARK_HOME``), probed once; a user-caused failure is one line on stderr
and an exit status from :mod:`tidemark.exit_codes`, never a traceback."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import typer

from tidemark.exit_codes import EXIT_CONFIG, EXIT_UNREACHABLE
from tidemark.config.settings import ConfigurationError, TidemarkSettings, load_settings
from tidemark.kafka.clients import base_config
from tidemark.kafka.reachability import BrokerUnreachable, require_broker


def fail(command: str, message: str, code: int) -> NoReturn:
    """One line on stderr, then exit with ``code``."""
    print(f"tidemark {command}: {message}", file=sys.stderr)
    raise typer.Exit(code)


def kafka_client(command: str) -> tuple[TidemarkSettings, dict[str, Any]]:
    """The settings and librdkafka client configuration of the Kafka to use, after one probe that
    a broker answers; exits 78 or 69 with one line when there is none."""
    try:
        settings = load_settings(TidemarkSettings)
        client = base_config(settings)
    except ConfigurationError as exc:
        fail(command, str(exc), EXIT_CONFIG)
    try:
        require_broker(client)
    except BrokerUnreachable as exc:
        fail(command, str(exc), EXIT_UNREACHABLE)
    return settings, client
