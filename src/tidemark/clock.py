"""The one wall clock: epoch milliseconds, as every timestamp in Tidemark's messages is written."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Milliseconds since the epoch, now (integer arithmetic: no float rounding)."""
    return time.time_ns() // 1_000_000
