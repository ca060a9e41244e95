"""Read a Dockerfile and replay its steps on this machine, under a scratch root (no Docker engine).

Contracts:
- ``parse_dockerfile(path)`` returns the stages in file order, each with its instructions
  (continuation lines joined, comments dropped; ``COPY`` flags such as ``--from`` apart from
  the arguments; ``ENV``/``CMD``/``ENTRYPOINT`` parsed). ``build_args(path)`` are the ``ARG``
  defaults declared before the first ``FROM`` (those a ``FROM`` line may use), and
  ``base_image(path)`` is the first stage's ``FROM`` with them expanded.
- ``ScratchImage(root, context)`` is the filesystem of an image under ``root``: ``run(stage)``
  applies the stage's ``WORKDIR``, ``ENV``, ``COPY`` (from ``context``, minus the ``**/<name>``
  exclusions of ``.dockerignore``) and ``RUN`` steps, the commands run with ``/bin/sh -c``
  exactly as written except that absolute paths are moved under ``root`` (all but
  ``BASE_IMAGE_PATHS``, which the base image provides: ``/dev/null`` stays ``/dev/null``).
  ``COPY --from`` is not replayed: a later stage reads the earlier stage's files where they are.
  ``run(stage, keywords)`` replays only those kinds of step (a runtime stage's ``RUN apt-get``
  needs a Debian image and root). Afterwards ``env`` is the stage's environment,
  ``entrypoint``/``cmd`` its ``ENTRYPOINT``/``CMD`` (when replayed; an ``ENTRYPOINT`` resets the
  ``CMD``, as Docker does) and ``exec(argv)`` runs a command as the image would (looked up on the
  image's ``PATH``). ``derive(stage, context)`` is the image a Dockerfile ``FROM`` this one
  builds: this image's files (the same root), environment, entrypoint and command, then the
  stage's steps, ``ENTRYPOINT`` and ``CMD`` (its ``COPY`` sources from ``context``).
- ``base_image_path`` is the ``PATH`` of the base image as replayed: this project's virtualenv
  (a Python 3.11 to 3.13 with pip, as ``python:3.11-slim`` has) before the machine's ``PATH``.
- ``third_party_site(target)`` makes a directory of links to every distribution installed in
  this project's virtualenv except Tidemark itself and pip; a ``.pth`` naming it in a scratch
  virtualenv lets ``pip install`` find the dependencies already satisfied instead of
  downloading them, while ``import tidemark`` can only find what was installed there.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import importlib.metadata
import subprocess
import sys
import sysconfig
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

BASE_IMAGE_PATHS = ("/bin", "/dev", "/etc", "/proc", "/tmp", "/usr")
_ABSOLUTE_PATH = re.compile(r"(?:^|(?<=[\s\"'=:(]))(/[\w.-][^\s\"':;)]*)")
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str
    flags: dict[str, str] = field(default_factory=dict)

    def words(self) -> list[str]:
        return shlex.split(self.arguments)

    def exec_form(self) -> list[str]:
        """The JSON (exec) form of ``CMD``/``ENTRYPOINT``."""
        parsed: list[str] = json.loads(self.arguments)
        return parsed

    def assignments(self) -> dict[str, str]:
        """``ENV`` in its ``KEY=value ...`` form."""
        return dict(word.split("=", 1) for word in self.words())


@dataclass(frozen=True)
class Stage:
    name: str
    base: str
    instructions: list[Instruction]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        return self.all(keyword)[-1]


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    if pending:
        lines.append(pending.strip())
    return lines


def parse_dockerfile(path: Path) -> list[Stage]:
    stages: list[Stage] = []
    for line in _logical_lines(path.read_text()):
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(name, words[0], []))
            continue
        flags: dict[str, str] = {}
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            name, _, value = flag[2:].partition("=")
            flags[name] = value
        if stages:
            stages[-1].instructions.append(Instruction(keyword, rest.strip(), flags))
    return stages


def stage(stages: list[Stage], name: str) -> Stage:
    return next(s for s in stages if s.name == name)


def build_args(path: Path) -> dict[str, str]:
    """The ``ARG name=default`` lines before the first ``FROM``."""
    declared: dict[str, str] = {}
    for line in _logical_lines(path.read_text()):
        keyword, _, rest = line.partition(" ")
        if keyword.upper() == "FROM":
            break
        if keyword.upper() == "ARG":
            name, _, default = rest.strip().partition("=")
            declared[name] = default
    return declared


def base_image(path: Path, overrides: dict[str, str] | None = None) -> str:
    """The first stage's base image, its ``${ARG}`` expanded with the defaults (or ``overrides``,
    as ``--build-arg`` gives them)."""
    values = {**build_args(path), **(overrides or {})}
    return _VARIABLE.sub(lambda m: values[m.group(1) or m.group(2)], parse_dockerfile(path)[0].base)


def dockerignore_exclusions(context: Path) -> list[str]:
    """The ``**/<name>`` patterns of ``.dockerignore``: names excluded at any depth."""
    ignore = context / ".dockerignore"
    lines = ignore.read_text().splitlines() if ignore.exists() else []
    return [line[3:] for line in lines if line.startswith("**/")]


def base_image_path() -> str:
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


class ScratchImage:
    """An image's filesystem under ``root``, built by replaying Dockerfile stages."""

    def __init__(self, root: Path, context: Path) -> None:
        self.root = root
        self.context = context
        self.env: dict[str, str] = {}
        self.workdir = "/"
        self.entrypoint: list[str] = []
        self.cmd: list[str] = []

    def path(self, image_path: str) -> Path:
        """Where an absolute path of the image is on this machine."""
        if any(image_path == p or image_path.startswith(p + "/") for p in BASE_IMAGE_PATHS):
            return Path(image_path)
        return self.root / image_path.lstrip("/")

    def rewrite(self, text: str) -> str:
        """``text`` with every absolute path of the image replaced by :meth:`path`."""
        return _ABSOLUTE_PATH.sub(lambda match: str(self.path(match.group(1))), text)

    def expand(self, text: str) -> str:
        return _VARIABLE.sub(lambda m: self.env.get(m.group(1) or m.group(2), ""), text)

    def run(self, stage: Stage, keywords: tuple[str, ...] = ("WORKDIR", "ENV", "COPY", "RUN")) -> None:
        """Apply the stage's steps of these kinds in order; each stage starts from the base image's
        environment, the files of earlier stages stay."""
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("TIDEMARK_")},
            "PATH": base_image_path(),
        }
        self.workdir = "/"
        for instruction in stage.instructions:
            if instruction.keyword in keywords:
                getattr(self, f"_{instruction.keyword.lower()}")(instruction)

    def derive(self, stage: Stage, context: Path) -> ScratchImage:
        """The image that ``stage`` (``FROM`` this image) builds; it shares this image's root."""
        image = ScratchImage(self.root, context)
        image.env, image.workdir = dict(self.env), self.workdir
        image.entrypoint, image.cmd = list(self.entrypoint), list(self.cmd)
        for instruction in stage.instructions:
            if instruction.keyword in ("WORKDIR", "ENV", "COPY", "RUN", "ENTRYPOINT", "CMD"):
                getattr(image, f"_{instruction.keyword.lower()}")(instruction)
        return image

    def _entrypoint(self, instruction: Instruction) -> None:
        self.entrypoint, self.cmd = instruction.exec_form(), []

    def _cmd(self, instruction: Instruction) -> None:
        self.cmd = instruction.exec_form()

    def _workdir(self, instruction: Instruction) -> None:
        self.workdir = instruction.arguments
        self.path(self.workdir).mkdir(parents=True, exist_ok=True)

    def _env(self, instruction: Instruction) -> None:
        for key, value in instruction.assignments().items():
            self.env[key] = self.expand(self.rewrite(value))

    def _copy(self, instruction: Instruction) -> None:
        if "from" in instruction.flags:
            return
        *sources, destination = instruction.words()
        target = self.path(destination if destination.startswith("/") else f"{self.workdir}/{destination}")
        ignore = shutil.ignore_patterns(*dockerignore_exclusions(self.context))
        for source in sources:
            origin = self.context / source
            if origin.is_dir():
                shutil.copytree(origin, target, symlinks=True, ignore=ignore, dirs_exist_ok=True)
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target / origin.name)

    def _run(self, instruction: Instruction) -> None:
        command = self.rewrite(instruction.arguments)
        result = subprocess.run(["/bin/sh", "-c", command], cwd=self.path(self.workdir), env=self.env,
                                capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise AssertionError(f"RUN {command} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")

    def which(self, command: str) -> Path:
        found = shutil.which(command, path=self.env["PATH"])
        if found is None:
            raise AssertionError(f"{command} is not on the image's PATH {self.env['PATH']}")
        return Path(found)

    def exec(self, argv: list[str], env: dict[str, str] | None = None, **kwargs: Any
             ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` with the image's environment (``env`` overriding some of it), its command
        looked up on the image's PATH."""
        return subprocess.run([str(self.which(argv[0])), *argv[1:]], env={**self.env, **(env or {})},
                              capture_output=True, text=True, **kwargs)


def third_party_site(target: Path) -> Path:
    """Links to the installed distributions Tidemark's runtime needs (pyproject's
    ``dependencies`` and the image's ``all`` extra, and theirs), so a dependency the project forgot
    to declare is missing here as it is in a user's fresh install."""
    site = Path(sysconfig.get_paths()["purelib"])
    target.mkdir(parents=True, exist_ok=True)
    for entry in sorted(_runtime_top_levels()):
        if (site / entry).exists() and not (target / entry).exists():
            (target / entry).symlink_to(site / entry)
    return target


def _runtime_top_levels() -> set[str]:
    """Top-level entries of site-packages (packages, modules, ``*.dist-info``) of the runtime
    dependency closure."""
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    todo, seen, entries = [Requirement(d) for d in project["dependencies"]], set(), set()
    todo.append(Requirement(f"{project['name']}[all]"))
    while todo:
        requirement = todo.pop()
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        if name == project["name"]:  # the extras' own references (`tidemark[services,s3]`)
            todo += [Requirement(r) for extra in requirement.extras for r in project["optional-dependencies"][extra]]
            continue
        if name in seen or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        distribution = importlib.metadata.distribution(requirement.name)
        for required in map(Requirement, distribution.requires or ()):  # with the extras asked for (psycopg[binary])
            if required.marker and any(required.marker.evaluate({"extra": e}) for e in requirement.extras):
                required.marker = None
            todo.append(required)
        entries |= {f.parts[0] for f in distribution.files or () if f.parts[0] != ".."}
    return entries
