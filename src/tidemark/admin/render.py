"""Human-readable text for the API's documents: aligned tables, durations, sizes, UTC times."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tidemark.state_processor.metadata_view import CheckpointView, TaskView

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(size: int | None) -> str:
    if size is None:
        return "-"
    value = float(size)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            if unit == "B":
                return f"{size} B"
            tenths = math.floor(value * 10 + 0.5)  # half up, as the checkpoints page rounds
            return f"{tenths // 10}.{tenths % 10} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:  # whole centiseconds, half up: the checkpoints page shows the same digits
        centis = (ms + 5) // 10
        return f"{centis // 100}.{centis % 100:02d} s"
    minutes, seconds = divmod(ms // 1000, 60)
    return f"{minutes}m{seconds:02d}s"


def format_time(epoch_ms: int | None) -> str:
    if epoch_ms is None:
        return "-"
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell, separated by two spaces."""
    cells = [[str(h) for h in headers], *[["-" if c is None else str(c) for c in r] for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def job_state(job: dict[str, Any]) -> str:
    """The job's state; a stop-with-savepoint in flight shows as RUNNING(stopping)."""
    state = str(job.get("state") or "-")
    return f"{state}(stopping)" if state == "RUNNING" and job.get("stopping") else state


def job_workers(job: dict[str, Any]) -> str | None:
    """The worker processes of each stage, ``stage:count`` separated by spaces (``None``: none)."""
    stages = job.get("workers") or {}
    return " ".join(f"{stage}:{len(workers)}" for stage, workers in stages.items()) or None


def jobs_text(document: dict[str, Any]) -> str:
    """``GET /jobs`` as a table: state and reason first, then epoch and checkpoint counts, the
    newest savepoint's ``_metadata`` path (what ``--from-savepoint`` takes)."""
    rows = [(j["job"], job_state(j), j["epoch"], j["counts"]["completed"], j["counts"]["failed"],
             (j["last_completed"] or {}).get("id"), (j.get("last_savepoint") or {}).get("metadata_path"),
             job_workers(j), j.get("state_reason") or "")
            for j in document["jobs"]]
    headers = ("JOB", "STATE", "EPOCH", "COMPLETED", "FAILED", "LAST ID", "LAST SAVEPOINT", "WORKERS", "REASON")
    return table(headers, rows)


def history_text(document: dict[str, Any]) -> str:
    """``GET /jobs/{job}/checkpoints`` as a table, newest first, with a counts line."""
    counts = document["counts"]
    rows = [
        (e["id"], e["type"], e["status"], format_time(e["triggered_at"]),
         format_duration(e["duration_ms"]), format_bytes(e["checkpointed_size_bytes"]),
         format_bytes(e["full_size_bytes"]), f"{e['num_acknowledged']}/{e['num_tasks']}",
         e["failure_reason"] or "")
        for e in document["checkpoints"]
    ]
    summary = (f"job {document['job']}: {counts['completed']} completed, {counts['failed']} failed, "
               f"{counts['in_progress']} in progress, {counts['restored']} restores")
    headers = ("ID", "TYPE", "STATUS", "TRIGGERED", "DURATION", "CHECKPOINTED", "FULL SIZE",
               "ACKED", "FAILURE")
    return f"{summary}\n{table(headers, rows)}"


def retained_text(document: dict[str, Any], key: str) -> str:
    """``.../checkpoints/retained`` or ``.../savepoints`` (``key``) as a table."""
    entries = document[key]
    rows = [
        (e["id"], e["type"], format_time(e["completed_at"]), format_duration(e["duration_ms"]),
         format_bytes(e["checkpointed_size_bytes"]), format_bytes(e["full_size_bytes"]),
         e["epoch"], e["path"])
        for e in entries
    ]
    headers = ("ID", "TYPE", "COMPLETED", "DURATION", "CHECKPOINTED", "FULL SIZE", "EPOCH", "PATH")
    lines = [f"job {document['job']}: {len(entries)} retained {key}", table(headers, rows)]
    lines.extend(f"unreadable metadata: {path}" for path in document.get("unreadable", ()))
    return "\n".join(lines)


def savepoint_text(document: dict[str, Any]) -> str:
    kind = "stop-with-savepoint" if document["stop"] else "savepoint"
    parts = [f"{kind} request {document['request_id']} for job {document['job']}: {document['status']}"]
    if document.get("savepoint_id") is not None:
        parts.append(f"id {document['savepoint_id']}")
    if document.get("metadata_path"):
        parts.append(f"metadata {document['metadata_path']}")
    if document.get("failure_reason"):
        parts.append(f"reason: {document['failure_reason']}")
    return ", ".join(parts)


def restore_text(document: dict[str, Any]) -> str:
    source = "savepoint" if document["is_savepoint"] else "checkpoint"
    header = (f"restore {document['restore_id']} of job {document['job']} from {source} "
              f"{document['checkpoint_id']} ({document['metadata_path']}) at parallelism "
              f"{document['parallelism']}, epoch {document['epoch']}")
    rows = [(a["task_id"], a["subtask_index"], f"{a['key_group_start']}..{a['key_group_end']}")
            for a in document["assignments"]]
    return f"{header}\n{table(('TASK', 'SUBTASK', 'KEY GROUPS'), rows)}"


def run_status(document: dict[str, Any]) -> str:
    """RUNNING, or EXITED(<code>) (EXITED(unknown) for a run re-adopted after a coordinator restart);
    a cancel in progress shows as RUNNING(cancelling)."""
    if document["status"] == "EXITED":
        code = document["exit_code"]
        return f"EXITED({'unknown' if code is None else code})"
    return "RUNNING(cancelling)" if document.get("cancel_requested_at") else "RUNNING"


def run_text(document: dict[str, Any]) -> str:
    """One run (``POST /runs``, ``GET /runs/{id}``, ``DELETE /runs/{id}``)."""
    lines = [f"run {document['run_id']}: job {document['job']} ({document['reference']}) {run_status(document)}",
             f"  pid {document['pid']}, parallelism {document['parallelism']}, "
             f"started {format_time(document['started_at'])}"]
    if document.get("from_checkpoint") is not None:
        lines.append(f"  restored from checkpoint {document['from_checkpoint']}")
    if document.get("from_savepoint"):
        lines.append(f"  restored from {document['from_savepoint']}")
    if document.get("fresh"):
        lines.append("  started with empty state (fresh)")
    if document.get("force"):
        lines.append("  forced (over committed output or newer state)")
    if document.get("ended_at"):
        lines.append(f"  ended {format_time(document['ended_at'])}")
    lines.append(f"  log {document['log_path']}, stage logs {document['run_dir']}/ (under the coordinator's home)")
    return "\n".join(lines)


def runs_text(document: dict[str, Any]) -> str:
    """``GET /runs`` as a table, oldest first."""
    rows = [(r["run_id"], r["job"], run_status(r), r["pid"], format_time(r["started_at"]), r["reference"],
             r["log_path"]) for r in document["runs"]]
    return table(("RUN", "JOB", "STATUS", "PID", "STARTED", "REFERENCE", "LOG"), rows)


def checkpoint_view_text(view: CheckpointView) -> str:
    """``tidemark state inspect``: a checkpoint's metadata view as a header and, per stage, tables of
    its tasks, its states and its source positions."""
    lines = [f"{view.kind.lower()} {view.checkpoint_id} of job {view.job}: {view.path}",
             f"completed {format_time(view.completed_at)}, max parallelism {view.max_parallelism}, "
             f"state {format_bytes(view.state_size_bytes)} ({format_bytes(view.checkpointed_size_bytes)} "
             "written by this checkpoint)"]
    for stage in view.stages:
        lines += ["", f"stage {stage.stage}: {len(stage.tasks)} tasks, {stage.snapshot} snapshot, "
                      f"backend {stage.backend}, {format_bytes(stage.size_bytes)}"]
        lines.append(_indent(table(("TASK", "KEY GROUPS", "HANDLES", "FILES", "SHARED", "SIZE", "WRITTEN",
                                    "CHANGELOG RANGES", "MATERIALIZATION"), [_task_row(t) for t in stage.tasks])))
        states = [(s.name, s.kind, s.value_serializer, s.user_key_serializer,
                   "-" if s.ttl_ms is None else f"{s.ttl_ms} ms") for s in (*stage.keyed_states, *stage.operator_states)]
        if not stage.keyed_states and stage.states_recorded_in == "changelog":
            lines.append("  keyed states: recorded in the changelog (read them with `tidemark state read`)")
        if states:
            lines.append(_indent(table(("STATE", "KIND", "VALUE SERIALIZER", "KEY SERIALIZER", "TTL"), states)))
        offsets = [(t.task, o["topic"], o["partition"], o["offset"]) for t in stage.tasks for o in t.source_offsets]
        if offsets:
            lines.append(_indent(table(("TASK", "TOPIC", "PARTITION", "NEXT OFFSET"), offsets)))
    return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def _task_row(task: TaskView) -> tuple[Any, ...]:
    materialization = task.materialization
    return (task.task, f"{task.key_group_start}-{task.key_group_end}",
            ",".join(h.kind for h in task.handles) or "-", sum(len(h.files) for h in task.handles),
            task.shared_files, format_bytes(task.size_bytes), format_bytes(task.written_bytes), len(task.changelog_ranges),
            "-" if materialization is None else
            f"{materialization['materialization_id']} (checkpoint {materialization['checkpoint_id']})")
