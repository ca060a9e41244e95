"""Structured JSON logs (structlog) for Tidemark code and for every library logging through stdlib."""

from __future__ import annotations

import logging
import sys
import threading
import time

import structlog

_SHARED = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.StackInfoRenderer(),
    structlog.processors.format_exc_info,
]


REPEAT_EVERY_S = 10.0


class RepeatLimiter(logging.Filter):
    """Lets a line of the named libraries through at most once per ``every_s`` for each message
    template, noting how many like it were dropped meanwhile. aiokafka logs every failed reconnect
    and fetch at ERROR, thousands of lines during a broker outage; the outage itself is reported by
    :mod:`tidemark.kafka.outage`."""

    def __init__(self, prefixes: tuple[str, ...], every_s: float = REPEAT_EVERY_S) -> None:
        super().__init__()
        self.prefixes = prefixes
        self.every_s = every_s
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str], float] = {}
        self._dropped: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self.prefixes):
            return True
        key, now = (record.name, str(record.msg)), time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.every_s:
                self._dropped[key] = self._dropped.get(key, 0) + 1
                return False
            self._last[key] = now
            dropped = self._dropped.pop(key, 0)
        if dropped:
            record.msg = f"{record.msg} ({dropped} more like it in the last {now - (last or now):.0f}s not logged)"
        return True


def configure_logging(level: str = "INFO", *, service: str | None = None) -> None:
    """Route structlog and stdlib logging to one JSON-lines stream on stderr. Idempotent."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.JSONRenderer(),
            ],
            foreign_pre_chain=_SHARED,
        )
    )
    handler.addFilter(RepeatLimiter(("aiokafka",)))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("aiokafka", "faust", "mode", "py4j", "httpx2", "httpcore2", "httpcore"):  # httpx2: a line per request
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
    structlog.configure(
        processors=[*_SHARED, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    if service:
        structlog.contextvars.bind_contextvars(service=service)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)
