"""Whether the Python code a worker process imported is still what is on disk.

An idle worker (:mod:`tidemark.runtime.placement.idle_workers`) must not run a later job with
code that changed since it imported it (a job module edited, Tidemark upgraded in place): it
refuses the claim and a new process starts. :func:`note` records the modification time of each
module file loaded and not seen yet; the worker calls it as its attempt starts (the job's modules
just imported) and when it goes idle. :func:`changed` names the first file whose time differs.
"""

from __future__ import annotations

import os
import sys

_seen: dict[str, int] = {}


def _files() -> list[str]:
    return [path for module in list(sys.modules.values())
            if isinstance(path := getattr(module, "__file__", None), str)]


def note() -> None:
    for path in _files():
        if path not in _seen:
            try:
                _seen[path] = os.stat(path).st_mtime_ns
            except OSError:
                _seen[path] = -1


def changed() -> str | None:
    """The first loaded module file changed (or gone) since :func:`note` saw it; None when none."""
    for path, mtime in _seen.items():
        try:
            now = os.stat(path).st_mtime_ns
        except OSError:
            now = -1
        if now != mtime:
            return path
    return None
