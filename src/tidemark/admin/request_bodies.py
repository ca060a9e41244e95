"""Operator request bodies and URL parts, parsed strictly into frozen pydantic models.

Contract: a body is a JSON object holding only the documented fields, each of its documented
type (no coercion: ``"2"`` is not an integer, ``1`` is not ``true``); anything else raises
:class:`BadRequest` (HTTP 400) with a one-line message naming the field. A storage path given by
a request must be a relative POSIX path without empty, ``.`` or ``..`` parts, backslashes,
control characters or percent-encoding, at most :data:`MAX_PATH_LENGTH` characters; the storage
layer checks the resolved location (symlinks included) again and raises ``InvalidStoragePath``,
which the API also answers with 400. The models' fields and bounds are those of the request
schemas in the coordinator's ``openapi.yaml`` (a unit test compares them).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, ClassVar

from annotated_types import Ge, Le
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from tidemark.checkpoint_store.layout import METADATA_FILE, validate_job_id
from tidemark.start_request import API_FIELDS, StartRequest
from tidemark.types import CheckpointId, JobId

MAX_PATH_LENGTH = 1024
MAX_JOB_ID_LENGTH = 200  # one path segment: file systems allow 255 bytes per name
MAX_PARALLELISM = 32768
MAX_JOB_ARGS_BYTES = 64 * 1024  # passed on the command line of the run (Linux: 128 KiB per argument)
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_RUN_ID = re.compile(r"^[0-9a-f]{1,64}$")

Parallelism = Annotated[int, Ge(1), Le(MAX_PARALLELISM)]
PositiveId = Annotated[CheckpointId, Ge(1)]


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


MAX_STATE_KEY_LENGTH = 4096
KEY_TYPES = ("str", "int")


def parse_state_key(key: str | None, key_type: str | None) -> str | int:
    """The key of a live state query from its ``key`` and ``key_type`` query parameters: the
    string as it is (``key_type=str``, the default), or an integer (``key_type=int``), to match the
    type the stage's ``key_by`` gives; ``BadRequest`` otherwise."""
    if key is None:
        raise BadRequest("the query parameter 'key' is required")
    if len(key) > MAX_STATE_KEY_LENGTH:
        raise BadRequest(f"key longer than {MAX_STATE_KEY_LENGTH} characters")
    kind = key_type or "str"
    if kind not in KEY_TYPES:
        raise BadRequest(f"key_type must be one of {', '.join(KEY_TYPES)}, got {kind!r}")
    if kind == "str":
        return key
    try:
        return int(key.strip(), 10)
    except ValueError:
        raise BadRequest(f"key {key!r} is not an integer (key_type=int)") from None


def parse_state_segment(value: str, what: str) -> str:
    """A stage or state name from a URL: non-empty, at most 200 characters; ``BadRequest`` otherwise."""
    if not value or len(value) > 200:
        raise BadRequest(f"not a {what} name: {value[:50]!r}")
    return value


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


# ---------------------------------------------------------------------- bodies


class _Body(BaseModel):
    """A request body: strict types, no unknown fields, immutable; :meth:`parse` reads raw bytes."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    empty_is_object: ClassVar[bool] = False  # an empty body stands for ``{}``

    @classmethod
    def parse(cls, raw: bytes) -> Any:
        """The body in ``raw``; ``BadRequest`` naming the first problem otherwise."""
        body = parse_object(raw, empty_is_object=cls.empty_is_object)
        try:
            return cls.model_validate(body)
        except ValidationError as exc:
            raise BadRequest(_problem(cls, exc.errors())) from None


def _problem(model: type[BaseModel], errors: list[ErrorDetails]) -> str:
    """One line for the first of ``errors``, unknown fields first (all of them)."""
    unknown = sorted(str(error["loc"][0]) for error in errors if error["type"] == "extra_forbidden")
    if unknown:
        return f"unknown field(s): {', '.join(unknown)}; allowed: {', '.join(sorted(model.model_fields))}"
    error = errors[0]
    if error["type"] == "value_error":  # a validator's own message, which names the field
        return str(error.get("ctx", {}).get("error", error["msg"]))
    name = str(error["loc"][0])
    field = model.model_fields[name]
    if error["type"] == "missing":
        return f"{name} must be {_expected(field, 'missing')}; it is missing"
    return f"{name} must be {_expected(field, error['type'])}, got {json.dumps(error['input'])[:100]}"


def _expected(field: FieldInfo, kind: str) -> str:
    """What ``field`` accepts, worded for the check ``kind`` (a pydantic error type) it failed."""
    if field.description:
        return field.description
    nullable = field.default is None and not field.is_required()
    or_null = " or null" if nullable else ""
    bounds = _metadata(field)
    low = next((item.ge for item in bounds if isinstance(item, Ge)), None)
    high = next((item.le for item in bounds if isinstance(item, Le)), None)
    if kind in ("greater_than_equal", "less_than_equal", "missing") and low is not None:
        if high is None:
            return f">= {low}"
        return f"{'null or ' if nullable else ''}an integer in {low}..{high}"
    return {
        "bool_type": "true or false",
        "int_type": f"an integer{or_null}",
        "string_type": f"a string{or_null}",
        "dict_type": f"a JSON object{or_null}",
    }.get(kind, "given")


def _metadata(field: FieldInfo) -> list[Any]:
    """The constraints of ``field``, also those declared on the inner type of ``X | None``."""
    found = list(field.metadata)
    for arg in getattr(field.annotation, "__args__", ()):
        found += list(getattr(arg, "__metadata__", ()))
    return found


class SavepointBody(_Body):
    """``POST /jobs/{job}/savepoints``: ``{"stop": bool, "target": relative dir | null,
    "generation": int | null}`` (``generation``: the deployment generation asking; a stop with
    one suspends the job for it, ``SavepointRequest.generation``)."""

    empty_is_object: ClassVar[bool] = True

    stop: bool = False
    target: str | None = None
    generation: Annotated[int, Ge(0)] | None = None

    @field_validator("target")
    @classmethod
    def _safe_target(cls, value: str | None) -> str | None:
        return None if value is None else validate_relative_path(value, "target")


class RestoreBody(_Body):
    """``POST /jobs/{job}/restore``: exactly one of ``checkpoint_id`` and ``savepoint_path``,
    and the new ``parallelism`` of every operator; ``newest_seen``: refuse (409) when a checkpoint
    newer than this id has completed (a supervisor's failover guard,
    :class:`~tidemark.checkpoint.restore_request.RestoreRequest`)."""

    parallelism: Parallelism
    checkpoint_id: PositiveId | None = None
    savepoint_path: str | None = None
    newest_seen: Annotated[int, Ge(0)] | None = None

    @field_validator("savepoint_path")
    @classmethod
    def _safe_path(cls, value: str | None) -> str | None:
        return None if value is None else validate_relative_path(value, "savepoint_path")

    @model_validator(mode="after")
    def _one_source(self) -> RestoreBody:
        if (self.checkpoint_id is None) == (self.savepoint_path is None):
            raise ValueError("give exactly one of checkpoint_id and savepoint_path")
        return self

    @property
    def metadata_path(self) -> str | None:
        """``savepoint_path`` naming the ``_metadata`` file (a directory gets it appended)."""
        return metadata_file(self.savepoint_path)


class RunBody(_Body):
    """``POST /runs``: ``{"job": "<package.module:attribute>", "args": {...}, "parallelism":
    int | null, "from_checkpoint": int | null, "from_savepoint": relative path | null, "fresh":
    bool, "force": bool, "allow_non_restored_state": bool}``, the start options of ``tidemark jobs run`` under the same rules
    (:mod:`tidemark.start_request`). Whether ``job`` is in
    the coordinator's catalog is checked by the API (403), not here."""

    job: str = Field(min_length=1, description="a job reference 'package.module:attribute'")
    args: dict[str, Any] = Field({}, description="a JSON object or null")  # null stands for {}
    parallelism: Parallelism | None = None
    from_checkpoint: PositiveId | None = None
    from_savepoint: str | None = None
    fresh: bool = False
    force: bool = False
    allow_non_restored_state: bool = False

    @field_validator("args", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("args")
    @classmethod
    def _args_fit_a_command_line(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(value).encode()) > MAX_JOB_ARGS_BYTES:
            raise ValueError(f"args must be at most {MAX_JOB_ARGS_BYTES} bytes of JSON")
        return value

    @field_validator("from_savepoint")
    @classmethod
    def _safe_savepoint(cls, value: str | None) -> str | None:
        return None if value is None else validate_relative_path(value, "from_savepoint")

    @model_validator(mode="after")
    def _one_start(self) -> RunBody:
        self.start  # noqa: B018 - raises StartRuleError (a ValueError) when the start breaks a rule
        return self

    @property
    def start(self) -> StartRequest:
        """How the run starts (:mod:`tidemark.start_request`)."""
        return StartRequest.from_api_fields(self.model_dump(include=set(API_FIELDS)))

    @property
    def metadata_path(self) -> str | None:
        """``from_savepoint`` naming the ``_metadata`` file (a directory gets it appended)."""
        return metadata_file(self.from_savepoint)
