"""``tidemark.processes.free_port``: a port a child binds seconds later is never handed out twice,
even when the kernel offers the same free port again (two services of one local cluster once
got the same port that way)."""

from __future__ import annotations

import socket

import pytest

from tidemark import processes


def test_a_port_the_kernel_offers_again_is_not_handed_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    offered = iter([41001, 41001, 41001, 41002])  # what binding port 0 returns, one bind after another

    class OfferingSocket(socket.socket):
        def getsockname(self):  # type: ignore[override]
            return ("127.0.0.1", next(offered))

    monkeypatch.setattr(processes.socket, "socket", OfferingSocket)
    monkeypatch.setattr(processes, "_GIVEN_PORTS", type(processes._GIVEN_PORTS)(maxlen=16))
    assert processes.free_port() == 41001
    assert processes.free_port() == 41002  # 41001 offered twice more, passed over


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = [processes.free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", ports[-1]))
