"""Tidemark's images, built by ``scripts/image.sh`` (buildah) and run with podman as the Helm chart's
pods run them, on a machine without a container daemon.

Contracts:
- ``build_images()`` runs ``scripts/image.sh build`` (nothing to do when the images were built from
  the same inputs) and returns each component's image by name (``services/<name>``), the base
  image under ``"base"``.
- ``podman(*args)`` is podman on the script's image storage and configuration.
- ``start_container(image, name, ...)`` starts a container the way the chart's pods run: the
  image's own user, entrypoint and command (``args`` replaces the command, as a pod's ``args``
  does), a read-only root filesystem, every capability dropped, no privilege escalation, a tmpfs
  at ``/tmp`` and the given host directories at ``/var/lib/tidemark/state`` and
  ``/var/lib/tidemark/checkpoints`` (the image's volumes), and the host's network, so the test's
  broker and the other containers are at 127.0.0.1. The container carries this process's pid as
  a label; ``remove_leftovers()`` removes those of test processes that are gone.
- ``Container.processes()`` are the host pids of every process in the container (its init and all
  their descendants); ``exec`` runs a command in it, as its user; ``remove()`` stops it (SIGTERM,
  then SIGKILL after ``grace_s``) and removes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tidemark.processes import pid_alive, tree_pids

REPO = Path(__file__).resolve().parents[2]
IMAGE_SCRIPT = REPO / "scripts" / "image.sh"
OWNER_LABEL = "io.tidemark.test-owner"
STATE_MOUNT = "/var/lib/tidemark/state"
CHECKPOINTS_MOUNT = "/var/lib/tidemark/checkpoints"
BUILD_TIMEOUT_S = 1800.0
IMAGE_UID = 10001  # the Dockerfile's USER, uid and gid


def component_names() -> list[str]:
    return sorted(path.parent.name for path in (REPO / "services").glob("*/Dockerfile"))


def build_images() -> dict[str, str]:
    build = subprocess.run(["bash", str(IMAGE_SCRIPT), "build"], capture_output=True, text=True,
                           timeout=BUILD_TIMEOUT_S)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    images = {"base": f"localhost/tidemark:{version}"}
    images.update({name: f"localhost/tidemark-{name}:{version}" for name in component_names()})
    return images


def podman(*args: str, timeout_s: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["bash", str(IMAGE_SCRIPT), "podman", *args], capture_output=True, text=True,
                            timeout=timeout_s, stdin=subprocess.DEVNULL)
    if check and result.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:2])} failed ({result.returncode}): {result.stderr[-2000:]}")
    return result


@dataclass(frozen=True)
class Container:
    name: str
    http_port: int

    def inspect(self) -> dict[str, object]:
        document: list[dict[str, object]] = json.loads(podman("inspect", "--type", "container", self.name).stdout)
        return document[0]

    def running(self) -> bool:
        state = self.inspect()["State"]
        assert isinstance(state, dict)
        return bool(state["Running"])

    def processes(self) -> list[int]:
        state = self.inspect()["State"]
        assert isinstance(state, dict) and state["Pid"], state
        return tree_pids(int(state["Pid"]))

    def exec(self, *argv: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        return podman("exec", self.name, *argv, timeout_s=timeout_s, check=False)

    def logs(self, lines: int = 40) -> str:
        result = podman("logs", "--tail", str(lines), self.name, check=False)
        return result.stdout + result.stderr

    def remove(self, grace_s: int = 30) -> None:
        podman("rm", "--force", "--time", str(grace_s), self.name, timeout_s=grace_s + 60, check=False)


def start_container(image: str, name: str, *, http_port: int, env: dict[str, str], state_dir: Path,
                    checkpoints_dir: Path, args: list[str] | None = None) -> Container:
    command = ["run", "--detach", "--name", name, "--label", f"{OWNER_LABEL}={os.getpid()}", "--pull", "never",
               "--network", "host", "--read-only", "--read-only-tmpfs=false",
               "--tmpfs", "/tmp:rw,nosuid,nodev,size=1g,mode=1777",
               "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
               "--volume", f"{state_dir}:{STATE_MOUNT}", "--volume", f"{checkpoints_dir}:{CHECKPOINTS_MOUNT}"]
    for key, value in {**env, "TIDEMARK_HTTP_PORT": str(http_port)}.items():
        command += ["--env", f"{key}={value}"]
    podman(*command, image, *(args or []))
    return Container(name, http_port)


def remove_leftovers() -> list[str]:
    """Remove the containers of test processes that are gone (a run killed before its teardown)."""
    listed = json.loads(podman("ps", "--all", "--filter", f"label={OWNER_LABEL}", "--format", "json").stdout or "[]")
    removed = []
    for container in listed:
        owner = container.get("Labels", {}).get(OWNER_LABEL, "")
        if not (owner.isdigit() and pid_alive(int(owner))):
            name = container["Names"][0]
            Container(name, 0).remove(grace_s=5)
            removed.append(name)
    return removed


def volume_dir(path: Path) -> Path:
    """A host directory for a volume, owned by the image's user (what the chart's ``fsGroup`` gives)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, IMAGE_UID, IMAGE_UID)
    return path
