"""What ``tidemark state bootstrap|transform`` take besides options: rows from JSON lines and
Python specs.

* :func:`json_rows` reads ``(key, value)`` rows from a JSON-lines file, one object a line, the key
  and the value each a field of it;
* :func:`load_reference` loads a Python object named ``package.module:attribute`` or
  ``path/to/file.py:attribute`` (a spec: a function returning what to write, or a value function
  of a map);
* :func:`bootstrap_spec` and :func:`transform_spec` call a spec and check what it returns: a
  bootstrap spec a mapping of stage names to lists of :class:`~.bootstrap.StateData`, a transform
  spec a list of operations (:mod:`.transform`).

Every problem is a :class:`SpecError` with a one-line message (naming the file and line of a bad row).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tidemark.state_processor.bootstrap import StateData
from tidemark.state_processor.transform import MapState, Operation, RemoveStage, RemoveState, RenameStage, SetState

_OPERATIONS = (RemoveStage, RenameStage, SetState, RemoveState, MapState)


class SpecError(ValueError):
    """A spec or an input file that cannot be used: the message is one line."""


def json_rows(path: Path, key_field: str, value_field: str) -> Iterator[tuple[Any, Any]]:
    """``(object[key_field], object[value_field])`` of each line of ``path`` (blank lines skipped)."""
    try:
        lines = path.open(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read {path}: {exc.strerror or exc}") from None
    with lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise SpecError(f"{path}:{number}: not JSON: {exc}") from None
            if not isinstance(row, dict) or key_field not in row or value_field not in row:
                raise SpecError(f"{path}:{number}: not an object with fields {key_field!r} and {value_field!r}")
            yield row[key_field], row[value_field]


def load_reference(reference: str) -> Any:
    """The object ``package.module:attribute`` or ``path/to/file.py:attribute`` names."""
    module_name, sep, attribute = reference.rpartition(":")
    if not sep or not module_name or not attribute:
        raise SpecError(f"expected 'package.module:attribute' or 'file.py:attribute', got {reference!r}")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise SpecError(f"no file {module_name}")
            spec = importlib.util.spec_from_file_location(f"tidemark_state_spec_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            sys.modules[spec.name] = module  # type: ignore[union-attr]
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        else:
            module = importlib.import_module(module_name)
    except SpecError:
        raise
    except Exception as exc:  # an import error, or what the module raises as it loads
        raise SpecError(f"cannot load {module_name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise SpecError(f"{module_name} has no attribute {attribute!r}")
        target = getattr(target, part)
    return target


def _called(reference: str) -> Any:
    target = load_reference(reference)
    return target() if callable(target) else target


def bootstrap_spec(reference: str) -> Mapping[str, Sequence[StateData]]:
    """What the bootstrap spec ``reference`` gives: ``{stage: [StateData, ...]}``."""
    stages = _called(reference)
    if not isinstance(stages, Mapping) or not all(
            isinstance(name, str) and isinstance(states, (list, tuple)) and all(isinstance(s, StateData) for s in states)
            for name, states in stages.items()):
        raise SpecError(f"{reference} gives a {type(stages).__name__}, not a mapping of stage names to lists of StateData")
    return stages


def transform_spec(reference: str) -> list[Operation]:
    """What the transform spec ``reference`` gives: a list of operations."""
    operations = _called(reference)
    if not isinstance(operations, (list, tuple)) or not all(isinstance(op, _OPERATIONS) for op in operations):
        raise SpecError(f"{reference} gives a {type(operations).__name__}, not a list of RemoveStage, RenameStage, "
                        f"SetState, RemoveState or MapState")
    return list(operations)


def value_function(reference: str) -> Any:
    """The ``function(key, value)`` of a map, named by ``reference``."""
    function = load_reference(reference)
    if not callable(function):
        raise SpecError(f"{reference} is a {type(function).__name__}, not a function of (key, value)")
    return function
