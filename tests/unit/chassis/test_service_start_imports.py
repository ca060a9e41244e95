"""A service's start imports what it runs and not more: a restarted service's first seconds are
its imports (``tidemark run <service>`` imports the CLI, then the service)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tidemark.config.service_modules import SERVICES

pytestmark = pytest.mark.unit

PROBE = """
import json, sys
import tidemark.cli
from tidemark.services import service_module
service_module(sys.argv[1])
print(json.dumps(sorted(sys.modules)))
"""
NOT_AT_START = (
    "confluent_kafka.schema_registry",  # the codec's default ids are local; a registry client only when configured
    "authlib",
    "httpx2",
    "tidemark.examples.access_log",  # the example jobs (and the state backends), for the CLI's verify command
)


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_a_service_start_imports_no_schema_registry_client(service: str) -> None:
    result = subprocess.run([sys.executable, "-c", PROBE, service], capture_output=True, text=True,
                            timeout=120, check=True)
    modules = json.loads(result.stdout)
    found = sorted({name for name in NOT_AT_START for m in modules if m == name or m.startswith(name + ".")})
    assert not found, f"tidemark run {service} imports {found}"


SETTINGS_CHECK = """
import json, sys
from tidemark.config.environment import unknown_variables
from tidemark.config.settings import TidemarkSettings
# a variable of another process (the coordinator's), as a job's environment from the local pipeline holds
assert unknown_variables(TidemarkSettings, {"TIDEMARK_API_TOKEN": "x"}) == []
print(json.dumps(sorted(sys.modules)))
"""


def test_checking_a_variable_against_every_process_settings_imports_no_service_framework() -> None:
    """A worker or supervisor whose environment names another process's setting checks it against
    the services' settings classes without importing the services' framework (0.2-0.4 s of a start)."""
    result = subprocess.run([sys.executable, "-c", SETTINGS_CHECK], capture_output=True, text=True,
                            timeout=120, check=True)
    modules = json.loads(result.stdout)
    framework = sorted({m.partition(".")[0] for m in modules} & {"faust", "mode", "aiokafka", "aiohttp"})
    assert not framework, f"checking the environment imports {framework}"
