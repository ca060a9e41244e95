"""Fixtures that hand a test a factory and close everything it made once the test is over."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar


class Closeable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=Closeable)


def closing_factory(make: Callable[..., C]) -> Iterator[Callable[..., C]]:
    """For a fixture to ``yield from``: yields ``make``, remembering what it returns, then closes
    each of those in the order made."""
    created: list[C] = []

    def tracked(*args: Any, **kwargs: Any) -> C:
        made = make(*args, **kwargs)
        created.append(made)
        return made

    yield tracked
    for made in created:
        made.close()
