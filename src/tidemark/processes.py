"""Child-process helpers used by every part that starts processes: the embedded broker, the local
services, the supervisor's workers and the coordinator's job launcher.

- :func:`free_port`: a loopback TCP port that was free a moment ago, never one it gave this process
  recently (a child binds its port seconds after it was chosen: the kernel could hand the same free
  port out again meanwhile, to the next child);
- :func:`die_with_parent`: a ``preexec_fn`` that has the kernel SIGKILL the child when its parent
  dies, so a killed test session or demo leaves nothing behind;
- :func:`pid_alive`: whether a pid names a live (not zombie) process, also one we did not start;
- :func:`stop_process` / :func:`stop_pid`: SIGTERM, a bounded wait, then SIGKILL.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from collections import deque

_PR_SET_PDEATHSIG = 1
_GIVEN_PORTS: deque[int] = deque(maxlen=4096)  # what free_port handed out, newest last
_GIVEN_LOCK = threading.Lock()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, not among the last 4096 it returned."""
    with _GIVEN_LOCK:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            if port not in _GIVEN_PORTS:
                break
        _GIVEN_PORTS.append(port)
        return port


def free_port_block(count: int) -> int:
    """A port ``p`` with ``p .. p + count - 1`` free on 127.0.0.1 a moment ago (a process that
    serves on ``p`` and gives ``p + 1 + i`` to its children)."""
    for _ in range(50):
        base = free_port()
        if base + count <= 65536 and all(port_free(port) for port in range(base, base + count)):
            return base
    raise RuntimeError(f"no block of {count} free ports")


def port_free(port: int) -> bool:
    """True when ``port`` on 127.0.0.1 can be bound now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours is not alive
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def stop_process(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> int:
    """Send ``sig`` to a running ``process``, SIGKILL it after ``timeout_s``; its exit status."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def stop_pid(pid: int, timeout_s: float, reap: subprocess.Popen[bytes] | None = None) -> bool:
    """SIGTERM ``pid`` (not necessarily our child), SIGKILL it after ``timeout_s``; True when it was
    alive. ``reap`` is its Popen when it is our child, so it does not linger as a zombie."""
    if not pid_alive(pid):
        _reap(reap)
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    if not _wait_gone(pid, reap, timeout_s):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _wait_gone(pid, reap, 10.0)
    _reap(reap)
    return True


def _wait_gone(pid: int, reap: subprocess.Popen[bytes] | None, timeout_s: float) -> bool:
    """Whether ``pid`` is gone within ``timeout_s`` (polling ``reap`` so our child is not a zombie)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if reap is not None:
            reap.poll()
        if not pid_alive(pid):
            return True
        time.sleep(0.02)
    return False


def _reap(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
