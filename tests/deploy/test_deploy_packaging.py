"""The wheel and the images: the Dockerfile's build replayed here makes a wheel that carries the
schemas, installs into a fresh virtualenv, and there decodes every golden sample; each service's
image, services/<name>/Dockerfile replayed over it, starts that service against the broker with
its own command, with no checkout in sight. The same wheel, installed alone with pip into a fresh
virtualenv of every Python 3.11 to 3.13 the machine has, runs `tidemark --version` and the job API."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from deploy_support import REPO, SERVICE_NAMES, VERSION, service_dockerfile
from dockerfile_replay import ScratchImage, base_image, parse_dockerfile, stage, third_party_site
from tidemark.kafka.topics import TopicNames
from tidemark.local.cluster import LocalService
from tidemark.processes import die_with_parent, free_port, stop_process

DOCKERFILE = REPO / "Dockerfile"
SERVICE_DOCKERFILES = sorted((REPO / "services").glob("*/Dockerfile"))
SCHEMAS = REPO / "schemas"
GOLDEN = REPO / "tests" / "golden"

# Runs in the installed virtualenv: decodes every golden sample with the packaged catalog.
DECODE_GOLDEN = """
import json, pathlib, sys
import tidemark
from tidemark.protocol.codec import Codec
from tidemark.protocol.schemas import NAMESPACE, default_schemas_dir
codec, decoded = Codec.local(), 0
for path in sorted(pathlib.Path(sys.argv[1]).glob("*/v*.json")):
    doc = json.loads(path.read_text())
    for sample in doc["samples"]:
        message = codec.decode(bytes.fromhex(sample["hex"]))
        assert f"{NAMESPACE}.{type(message).__name__}-value" == doc["subject"], path
        decoded += 1
print(json.dumps({"tidemark": tidemark.__file__, "schemas": str(default_schemas_dir()), "decoded": decoded}))
"""


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> ScratchImage:
    """The image's build stage replayed under a scratch root, then the runtime stage's environment.

    The runtime stage takes the build stage's virtualenv (``COPY --from=build``); before the
    build creates it, a ``.pth`` there names this project's third-party distributions so that
    its ``pip install`` finds them installed instead of downloading PySpark again.
    """
    stages = parse_dockerfile(DOCKERFILE)
    runtime = stage(stages, "runtime")
    venv_dir = next(c for c in runtime.all("COPY") if c.flags.get("from") == "build").words()[0]
    scratch = ScratchImage(tmp_path_factory.mktemp("image"), REPO)
    site = scratch.path(venv_dir) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    site.mkdir(parents=True)
    (site / "third-party.pth").write_text(f"{third_party_site(tmp_path_factory.mktemp('third-party'))}\n")
    scratch.run(stage(stages, "build"))
    scratch.run(runtime, keywords=("ENV", "ENTRYPOINT", "CMD"))
    return scratch


def _service_image(image: ScratchImage, name: str) -> ScratchImage:
    """The image services/<name>/Dockerfile builds FROM the base image (its build argument's default)."""
    dockerfile = service_dockerfile(name)
    assert base_image(dockerfile) == f"tidemark:{VERSION}"  # what `docker build -t tidemark:<version> .` tags
    (layer,) = parse_dockerfile(dockerfile)
    return image.derive(layer, dockerfile.parent)


def _wheel(image: ScratchImage) -> Path:
    wheels = sorted(image.root.glob("*/tidemark-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.mark.parametrize("dockerfile", [DOCKERFILE, *SERVICE_DOCKERFILES], ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_copy_source_exists_in_the_build_context(dockerfile: Path) -> None:
    context = REPO if dockerfile == DOCKERFILE else dockerfile.parent  # as their `docker build` lines say
    ignore = (context / ".dockerignore").read_text().splitlines() if (context / ".dockerignore").exists() else []
    stages = parse_dockerfile(dockerfile)
    for index, current in enumerate(stages):
        for copy in current.all("COPY"):
            if "from" in copy.flags:
                assert copy.flags["from"] in {s.name for s in stages[:index]}, copy
                continue
            for source in copy.words()[:-1]:
                assert (context / source).exists(), f"{dockerfile.name}: COPY {source} does not exist"
                if ignore:
                    assert f"!{source}" in ignore or f"!{source}/**" in ignore, f".dockerignore leaves out {source}"


def test_the_wheel_carries_every_schema_file(image: ScratchImage) -> None:
    expected = {f"tidemark/schemas/{p.relative_to(SCHEMAS).as_posix()}": p.read_bytes()
                for p in [SCHEMAS / "ids.json", *SCHEMAS.glob("*/v*.avsc")]}
    with zipfile.ZipFile(_wheel(image)) as wheel:
        shipped = {name: wheel.read(name) for name in wheel.namelist() if name.startswith("tidemark/schemas/")}
        licenses = [name for name in wheel.namelist() if name.endswith(".dist-info/licenses/LICENSE")]
        assert len(licenses) == 1 and wheel.read(licenses[0]) == (REPO / "LICENSE").read_bytes()
    assert shipped == expected


def test_the_installed_package_decodes_every_golden_sample_outside_the_checkout(
        image: ScratchImage, tmp_path: Path) -> None:
    assert "TIDEMARK_SCHEMAS_DIR" not in image.env and "PYTHONPATH" not in os.environ
    result = image.exec(["python", "-c", DECODE_GOLDEN, str(GOLDEN)], cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    venv = image.which("python").parent.parent
    assert Path(report["tidemark"]).is_relative_to(venv) and Path(report["schemas"]).is_relative_to(venv), report
    samples = sum(len(json.loads(p.read_text())["samples"]) for p in GOLDEN.glob("*/v*.json"))
    assert report["decoded"] == samples > 0


def test_the_image_entrypoint_runs_the_installed_cli(image: ScratchImage, tmp_path: Path) -> None:
    runtime = stage(parse_dockerfile(DOCKERFILE), "runtime")
    entrypoint, command = runtime.last("ENTRYPOINT").exec_form(), runtime.last("CMD").exec_form()
    assert entrypoint[:2] == ["/usr/bin/tini", "--"]  # tini, PID 1 in the image, comes from apt
    assert image.which(entrypoint[2]).is_relative_to(image.root)
    result = image.exec([*entrypoint[2:], *command], cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "run" in result.stdout and "jobs" in result.stdout
    version = image.exec([*entrypoint[2:], "--version"], cwd=tmp_path, timeout=120)
    assert (version.returncode, version.stdout) == (0, f"tidemark {VERSION}\n")


def test_the_worker_image_runs_the_installed_example_job(image: ScratchImage, tmp_path: Path) -> None:
    """Its CMD (`jobs run <job>`) names a job the installed package holds; the job itself runs in
    tests/e2e (it needs the services and Spark)."""
    worker = _service_image(image, "worker")
    assert worker.entrypoint == image.entrypoint and worker.env["TIDEMARK_HTTP_PORT"] == "9404"
    command, reference = worker.cmd[:2], worker.cmd[2]
    assert command == ["jobs", "run"]
    module, attribute = reference.split(":")
    result = worker.exec(["python", "-c", f"import {module} as m; print(type(m.{attribute}).__name__)"],
                         cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr


def test_the_image_carries_sparks_kafka_connector_and_needs_no_maven_at_run_time(
        image: ScratchImage, tmp_path: Path) -> None:
    """The build stage fetched the connector into the image's cache (TIDEMARK_CACHE_DIR); a
    worker resolves it there with no ``mvn`` on its PATH, as in the runtime image."""
    no_maven = tmp_path / "bin"
    no_maven.mkdir()
    (no_maven / "mvn").write_text("#!/bin/sh\necho 'mvn must not run' >&2\nexit 9\n")
    (no_maven / "mvn").chmod(0o755)
    result = image.exec(["python", "-c", "from tidemark.spark.kafka_connector import connector_jars; "
                         "print('\\n'.join(str(j) for j in connector_jars()))"],
                        cwd=tmp_path, timeout=120, env={"PATH": f"{no_maven}:{image.env['PATH']}"})
    assert result.returncode == 0, result.stderr
    jars = [Path(line) for line in result.stdout.split()]
    assert {j.name.split("-")[0] for j in jars} >= {"spark", "kafka", "commons"}, jars
    assert all(j.is_relative_to(image.root) and j.exists() for j in jars), jars


def test_the_image_builds_the_class_archive_its_workers_map(image: ScratchImage, tmp_path: Path) -> None:
    """The runtime stage's step that trains the JVM class archive (``tidemark.spark.class_archive``)
    leaves it in the image's cache, where a worker of the image finds it. The image's JDK comes
    from the runtime stage's apt-get; here it is this machine's."""
    from tidemark.jvm import find_java_home

    (step,) = [run for run in stage(parse_dockerfile(DOCKERFILE), "runtime").all("RUN")
               if "tidemark.spark.class_archive" in run.arguments]
    java = {"JAVA_HOME": str(find_java_home())}
    built = image.exec(step.words(), cwd=tmp_path, timeout=600, env=java)
    assert built.returncode == 0, built.stderr[-2000:]
    found = image.exec(["python", "-c", "from tidemark.spark.class_archive import with_archive; print(with_archive(''))"],
                       cwd=tmp_path, timeout=120, env=java)
    assert found.returncode == 0, found.stderr
    archive = Path(found.stdout.split()[0].removeprefix("-XX:SharedArchiveFile="))
    assert archive.is_relative_to(image.root) and archive.stat().st_size > 50 * 2**20, found.stdout


@pytest.mark.parametrize("name", [n for n in SERVICE_NAMES if n != "worker"])
def test_each_service_image_starts_its_service_against_the_broker(
        image: ScratchImage, name: str, kafka_bootstrap: str, topic_names: TopicNames, tmp_path: Path) -> None:
    """The service's image as services/<name>/Dockerfile builds it: the base image's entrypoint
    (tini, then the installed `tidemark`) with the layer's CMD `run <name>` and its environment."""
    service_image = _service_image(image, name)
    entrypoint, command = service_image.entrypoint, service_image.cmd
    assert entrypoint[:2] == ["/usr/bin/tini", "--"] and command == ["run", name]
    assert service_image.env["TIDEMARK_HTTP_PORT"] != image.env.get("TIDEMARK_HTTP_PORT")  # the layer's port
    port = free_port()  # instead of the image's fixed one, which another test may hold
    env = {**service_image.env, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "TIDEMARK_TOPIC_PREFIX": topic_names.prefix,
           "TIDEMARK_HTTP_PORT": str(port), "TIDEMARK_HOME": str(tmp_path / "home"),
           "TIDEMARK_STATE_DIR": str(tmp_path / "state"),
           "TIDEMARK_CHECKPOINT_STORAGE_URL": (tmp_path / "checkpoints").as_uri()}
    log_path = tmp_path / f"{name}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([str(service_image.which(entrypoint[2])), *entrypoint[3:], *command], cwd=tmp_path,
                                   env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   preexec_fn=die_with_parent)
    service = LocalService(name, port, process, log_path, env)
    try:
        deadline = time.monotonic() + 90
        while not service.ready():
            assert process.poll() is None, f"exited with {process.returncode}:\n{service.log_tail()}"
            assert time.monotonic() < deadline, f"not ready after 90 s:\n{service.log_tail()}"
            time.sleep(0.2)
    finally:
        code = stop_process(process, timeout_s=30)
    assert code == 0, service.log_tail()


def _interpreters() -> list[pytest.param]:
    """python3.11 to python3.13 where this machine has them on PATH (and they run), plus the
    paths in TIDEMARK_TEST_PYTHONS; one that is missing is a skip that names it."""
    found: dict[str, str] = {}
    for minor in (11, 12, 13):
        path = shutil.which(f"python3.{minor}")
        if path and _runs_as(path, f"3.{minor}"):
            found[f"3.{minor}"] = path
    for path in filter(None, os.environ.get("TIDEMARK_TEST_PYTHONS", "").split(os.pathsep)):
        version = _runs_as(path, None)
        if version:
            found.setdefault(version, path)
    return [pytest.param(found.get(v), id=v, marks=() if v in found else
                         pytest.mark.skip(reason=f"no python{v} on this machine (PATH or TIDEMARK_TEST_PYTHONS)"))
            for v in sorted({"3.11", "3.12", "3.13", *found}, key=lambda v: tuple(map(int, v.split("."))))]


def _runs_as(path: str, expected: str | None) -> str | None:
    """The interpreter's X.Y when it runs (a pyenv shim of an uninstalled version does not)."""
    result = subprocess.run([path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                            capture_output=True, text=True, timeout=30)
    version = result.stdout.strip() if result.returncode == 0 else None
    return version if expected in (None, version) else None


@pytest.mark.parametrize("python", _interpreters())
def test_the_wheel_installs_like_a_library_into_a_fresh_venv_of_each_interpreter(
        image: ScratchImage, python: str, tmp_path: Path) -> None:
    """`pip install` of the image's wheel alone (a job author's install: pyproject's ranges,
    resolved by pip, no extra), then `tidemark --version` and the job API; the services' framework
    is not installed, and a service says which extra it needs."""
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--progress-bar", "off",
                                str(_wheel(image))], capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    version = subprocess.run([str(venv / "bin" / "tidemark"), "--version"], capture_output=True, text=True,
                             cwd=tmp_path, env=env, timeout=120)
    assert (version.returncode, version.stdout) == (0, f"tidemark {VERSION}\n"), version.stderr
    job_api = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import importlib.util, tidemark.api, tidemark.runtime.worker.process; "
                              "print(importlib.util.find_spec('faust'))"],
                             capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert (job_api.returncode, job_api.stdout) == (0, "None\n"), job_api.stderr
    service = subprocess.run([str(venv / "bin" / "tidemark"), "run", "coordinator"], capture_output=True, text=True,
                             cwd=tmp_path, env=env, timeout=120)
    assert service.returncode == 3 and "pip install 'tidemark[services]'" in service.stderr, service.stderr
