"""``tidemark.processes.free_port`` and ``free_port_block``: a port a child binds seconds later (and
a restarted worker binds again) is never handed out twice by one process, nor taken from the
kernel's ephemeral range, where any outgoing connection may take it meanwhile (two services of one
local cluster once got the same port; a worker-host pod's worker once found its port taken)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tidemark import processes


@pytest.fixture
def fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "_GIVEN_PORTS", type(processes._GIVEN_PORTS)(maxlen=64))


def test_free_ports_are_distinct_bindable_and_outside_the_ephemeral_range() -> None:
    first, last = (int(p) for p in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = [processes.free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert not [p for p in ports if first <= p <= last]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", ports[-1]))


def test_no_port_of_a_block_is_handed_out_again(monkeypatch: pytest.MonkeyPatch, fresh_memory: None) -> None:
    bases = iter([20000, 20001, 20002, 20000, 20003, 20005])  # what the random choice draws, call after call
    monkeypatch.setattr(processes.random, "randrange", lambda low, high: next(bases))
    monkeypatch.setattr(processes, "port_free", lambda port: True)
    assert processes.free_port_block(3) == 20000  # 20000, 20001, 20002
    assert processes.free_port() == 20003  # 20001, 20002 and 20000 drawn again, passed over
    assert processes.free_port_block(2) == 20005  # 20003 would overlap


def test_a_port_something_else_holds_is_passed_over(monkeypatch: pytest.MonkeyPatch, fresh_memory: None) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        held.listen()
        draws = []
        choose = processes.random.randrange

        def draw(low: int, high: int) -> int:  # the held port first, then as usual
            draws.append(taken if not draws else choose(low, high))
            return draws[-1]

        monkeypatch.setattr(processes.random, "randrange", draw)
        port = processes.free_port()
    assert draws[0] == taken and port == draws[-1] != taken


@pytest.mark.parametrize(("ephemeral", "expected"), [
    ("32768\t60999", (10000, 32768)),  # Linux's default: below the range
    ("10500 60999", (61000, 65536)),  # little room below: above it
    ("1024 65000", (10000, 65536)),  # no room either way: everything from 10000
    (None, (10000, 32768)),  # not Linux: as if the default
])
def test_the_ports_chosen_from_avoid_the_ephemeral_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           ephemeral: str | None, expected: tuple[int, int]) -> None:
    path = tmp_path / "ip_local_port_range"
    if ephemeral is not None:
        path.write_text(ephemeral + "\n")
    monkeypatch.setattr(processes, "_EPHEMERAL_RANGE", path)
    assert processes._port_range() == expected
