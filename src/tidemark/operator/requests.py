"""Operator request bodies and URL parts, parsed strictly into frozen dataclasses.

Contract: a body is a JSON object holding only the documented fields, each of its documented
type; anything else raises :class:`BadRequest` (HTTP 400) with a message naming the field.
A storage path given by a request must be a relative POSIX path without empty, ``.`` or ``..``
parts, backslashes, control characters or percent-encoding, at most :data:`MAX_PATH_LENGTH`
characters; the storage layer checks the resolved location (symlinks included) again and raises
``InvalidStoragePath``, which the API also answers with 400.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tidemark.checkpoint_store.layout import METADATA_FILE, validate_job_id
from tidemark.types import CheckpointId, JobId

MAX_PATH_LENGTH = 1024
MAX_JOB_ID_LENGTH = 200  # one path segment: file systems allow 255 bytes per name
MAX_PARALLELISM = 32768
MAX_JOB_ARGS_BYTES = 64 * 1024  # passed on the command line of the run (Linux: 128 KiB per argument)
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_RUN_ID = re.compile(r"^[0-9a-f]{1,64}$")


class BadRequest(ValueError):
    """The request is malformed: not JSON, wrong fields or types, or an unusable path."""


def parse_object(raw: bytes, *, empty_is_object: bool = False) -> dict[str, Any]:
    """The JSON object in ``raw``; ``BadRequest`` for anything else."""
    if not raw.strip():
        if empty_is_object:
            return {}
        raise BadRequest("request body must be a JSON object")
    try:
        value = json.loads(raw)
        json.dumps(value, ensure_ascii=False).encode("utf-8")  # lone surrogates (\ud800) are not text
    except RecursionError:
        raise BadRequest("request body is nested too deeply") from None
    except UnicodeEncodeError:
        raise BadRequest("request body holds a lone surrogate (\\uD800-\\uDFFF): not valid Unicode") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of over 4300 digits
        raise BadRequest(f"request body is not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(value, dict):
        raise BadRequest(f"request body must be a JSON object, not {type(value).__name__}")
    return value


def _reject_unknown(body: dict[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise BadRequest(f"unknown field(s): {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")


def _optional_int(body: dict[str, Any], field: str) -> int | None:
    value = body.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{field} must be an integer or null, got {json.dumps(value)}")
    return value


def _optional_str(body: dict[str, Any], field: str) -> str | None:
    value = body.get(field)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{field} must be a string or null, got {json.dumps(value)}")
    return value


def _flag(body: dict[str, Any], field: str) -> bool:
    """``body[field]``, false when absent."""
    value = body.get(field, False)
    if not isinstance(value, bool):
        raise BadRequest(f"{field} must be true or false, got {json.dumps(value)}")
    return value


def validate_relative_path(path: str, field: str) -> str:
    """``path`` if it is a safe relative storage path (see the module contract)."""
    if not path or len(path) > MAX_PATH_LENGTH:
        raise BadRequest(f"{field} must be 1..{MAX_PATH_LENGTH} characters")
    if path.startswith("/") or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", path):
        raise BadRequest(f"{field} must be relative to the checkpoint storage: {path!r}")
    if "%" in path or "\\" in path or any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise BadRequest(f"{field} must not contain '%', '\\' or control characters: {path!r}")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise BadRequest(f"{field} must not have empty, '.' or '..' parts: {path!r}")
    return path


def metadata_file(path: str | None) -> str | None:
    """A checkpoint or savepoint ``path`` naming its ``_metadata`` file (a directory gets it appended)."""
    if path is None or path == METADATA_FILE or path.endswith(f"/{METADATA_FILE}"):
        return path
    return f"{path}/{METADATA_FILE}"


def parse_job_id(value: str) -> JobId:
    """A job id from a URL (one storage path segment); ``BadRequest`` otherwise."""
    if len(value) > MAX_JOB_ID_LENGTH:
        raise BadRequest(f"job id longer than {MAX_JOB_ID_LENGTH} characters")
    try:
        return validate_job_id(JobId(value))
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def parse_request_id(value: str) -> str:
    if not _REQUEST_ID.fullmatch(value):
        raise BadRequest(f"not a savepoint request id: {value!r}")
    return value


def parse_run_id(value: str) -> str:
    if not _RUN_ID.fullmatch(value):
        raise BadRequest(f"not a run id: {value!r}")
    return value


def parse_checkpoint_id(value: str) -> CheckpointId:
    """A checkpoint id from a URL: decimal digits, at least 1; ``BadRequest`` otherwise."""
    if not (value.isascii() and value.isdigit() and len(value) <= 19 and int(value) >= 1):
        raise BadRequest(f"not a checkpoint id: {value!r}")
    return CheckpointId(int(value))


@dataclass(frozen=True, slots=True)
class SavepointBody:
    """``POST /jobs/{job}/savepoints``: ``{"stop": bool, "target": relative dir | null}``."""

    stop: bool = False
    target: str | None = None

    @classmethod
    def parse(cls, raw: bytes) -> SavepointBody:
        body = parse_object(raw, empty_is_object=True)
        _reject_unknown(body, frozenset({"stop", "target"}))
        stop = body.get("stop", False)
        if not isinstance(stop, bool):
            raise BadRequest(f"stop must be true or false, got {json.dumps(stop)}")
        target = _optional_str(body, "target")
        return cls(stop, None if target is None else validate_relative_path(target, "target"))


@dataclass(frozen=True, slots=True)
class RestoreBody:
    """``POST /jobs/{job}/restore``: exactly one of ``checkpoint_id`` and ``savepoint_path``,
    and the new ``parallelism`` of every operator."""

    parallelism: int
    checkpoint_id: CheckpointId | None = None
    savepoint_path: str | None = None

    @classmethod
    def parse(cls, raw: bytes) -> RestoreBody:
        body = parse_object(raw)
        _reject_unknown(body, frozenset({"checkpoint_id", "savepoint_path", "parallelism"}))
        checkpoint_id = _optional_int(body, "checkpoint_id")
        savepoint_path = _optional_str(body, "savepoint_path")
        parallelism = _optional_int(body, "parallelism")
        if (checkpoint_id is None) == (savepoint_path is None):
            raise BadRequest("give exactly one of checkpoint_id and savepoint_path")
        if checkpoint_id is not None and checkpoint_id < 1:
            raise BadRequest(f"checkpoint_id must be >= 1, got {checkpoint_id}")
        if parallelism is None or not 1 <= parallelism <= MAX_PARALLELISM:
            raise BadRequest(f"parallelism must be an integer in 1..{MAX_PARALLELISM}")
        if savepoint_path is not None:
            savepoint_path = validate_relative_path(savepoint_path, "savepoint_path")
        return cls(parallelism, None if checkpoint_id is None else CheckpointId(checkpoint_id),
                   savepoint_path)

    @property
    def metadata_path(self) -> str | None:
        """``savepoint_path`` naming the ``_metadata`` file (a directory gets it appended)."""
        return metadata_file(self.savepoint_path)


@dataclass(frozen=True, slots=True)
class RunBody:
    """``POST /runs``: ``{"job": "<package.module:attribute>", "args": {...}, "parallelism":
    int | null, "from_checkpoint": int | null, "from_savepoint": relative path | null, "fresh":
    bool, "force": bool}``, the start options of ``tidemark jobs run``: at most one of
    ``from_checkpoint`` and ``from_savepoint``, neither with ``fresh``. Whether ``job`` is in
    the coordinator's catalog is checked by the API (403), not here."""

    job: str
    args: dict[str, Any]
    parallelism: int | None = None
    from_checkpoint: CheckpointId | None = None
    from_savepoint: str | None = None
    fresh: bool = False
    force: bool = False

    @classmethod
    def parse(cls, raw: bytes) -> RunBody:
        body = parse_object(raw)
        _reject_unknown(body, frozenset({"job", "args", "parallelism", "from_checkpoint", "from_savepoint",
                                         "fresh", "force"}))
        job = body.get("job")
        if not isinstance(job, str) or not job:
            raise BadRequest(f"job must be a job reference 'package.module:attribute', got {json.dumps(job)}")
        args = body.get("args")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise BadRequest(f"args must be a JSON object or null, got {json.dumps(args)[:100]}")
        if len(json.dumps(args).encode()) > MAX_JOB_ARGS_BYTES:
            raise BadRequest(f"args must be at most {MAX_JOB_ARGS_BYTES} bytes of JSON")
        parallelism = _optional_int(body, "parallelism")
        if parallelism is not None and not 1 <= parallelism <= MAX_PARALLELISM:
            raise BadRequest(f"parallelism must be null or an integer in 1..{MAX_PARALLELISM}")
        from_checkpoint = _optional_int(body, "from_checkpoint")
        from_savepoint = _optional_str(body, "from_savepoint")
        if from_checkpoint is not None and from_savepoint is not None:
            raise BadRequest("give at most one of from_checkpoint and from_savepoint")
        if from_checkpoint is not None and from_checkpoint < 1:
            raise BadRequest(f"from_checkpoint must be >= 1, got {from_checkpoint}")
        if from_savepoint is not None:
            from_savepoint = validate_relative_path(from_savepoint, "from_savepoint")
        fresh, force = _flag(body, "fresh"), _flag(body, "force")
        if fresh and (from_checkpoint is not None or from_savepoint is not None):
            raise BadRequest("fresh starts with empty state; it cannot be combined with from_checkpoint "
                             "or from_savepoint")
        return cls(job, args, parallelism,
                   None if from_checkpoint is None else CheckpointId(from_checkpoint), from_savepoint,
                   fresh, force)

    @property
    def metadata_path(self) -> str | None:
        """``from_savepoint`` naming the ``_metadata`` file (a directory gets it appended)."""
        return metadata_file(self.from_savepoint)
