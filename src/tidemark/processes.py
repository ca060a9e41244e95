"""Child-process helpers used by every part that starts processes: the embedded broker, the local
services, the supervisor's workers and the coordinator's job launcher.

- :func:`free_port` / :func:`free_port_block`: loopback TCP ports that were free a moment ago,
  never one this process gave out recently, and never in the kernel's ephemeral range. A child
  binds its port seconds after it was chosen, and a worker binds the same port again at every
  restart: a port from the ephemeral range can meanwhile be taken by any outgoing connection on the
  machine (the kernel hands those out as source ports) or be offered again to the next child, and
  the worker then dies with "Address already in use";
- :func:`die_with_parent`: a ``preexec_fn`` that has the kernel SIGKILL the child when its parent
  dies, so a killed test session or demo leaves nothing behind;
- :func:`pid_alive`: whether a pid names a live (not zombie) process, also one we did not start;
- :func:`process_start_time`: when a live process started, which with its pid names it for good
  (a pid is recycled, the pair is not);
- :func:`process_tree` / :func:`tree_pids`: a process and its descendants as ``/proc`` shows them
  (parent, CPU time, resident memory), parents first;
- :func:`stop_processes` / :func:`stop_process` / :func:`stop_pid`: SIGTERM, a bounded wait, then
  SIGKILL (several processes are signalled together and wait out their shutdowns side by side);
- :func:`paused`: a process stopped (SIGSTOP) for a block, and only once every thread of it is,
  continued after it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_GIVEN_PORTS: deque[int] = deque(maxlen=4096)  # what free_port(_block) handed out, newest last
_GIVEN_LOCK = threading.Lock()
_LOWEST_PORT = 10000  # below: well-known and registered ports of other software
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
PROC = Path("/proc")
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def _port_range() -> tuple[int, int]:
    """Ports to choose from, ``[low, high)``: from ``_LOWEST_PORT`` up to the ephemeral range (on
    Linux by default 32768-60999, so 10000-32767), else above it; when neither leaves 2000 ports,
    every port from ``_LOWEST_PORT`` (then only the memory of what was handed out protects)."""
    try:
        first, last = (int(part) for part in _EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        first, last = 32768, 60999
    if first - _LOWEST_PORT >= 2000:
        return _LOWEST_PORT, first
    if 65536 - (last + 1) >= 2000:
        return last + 1, 65536
    return _LOWEST_PORT, 65536


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, outside the ephemeral range and not
    among the last 4096 this process handed out."""
    return free_port_block(1)


def free_port_block(count: int) -> int:
    """A port ``p`` with ``p .. p + count - 1`` free on 127.0.0.1 a moment ago (a process that
    serves on ``p`` and gives ``p + 1 + i`` to its children), none of them handed out recently."""
    low, high = _port_range()
    with _GIVEN_LOCK:
        for _ in range(200):
            base = random.randrange(low, high - count + 1)
            block = range(base, base + count)
            if not any(port in _GIVEN_PORTS for port in block) and all(port_free(port) for port in block):
                _GIVEN_PORTS.extend(block)
                return base
    raise RuntimeError(f"no block of {count} free ports in {low}-{high - 1}")


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when ``port`` on ``host`` can be bound now (as a server binds it: address reuse on,
    so a port a stopped process left in TIME_WAIT counts as free)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
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


def process_start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat``); None when no such
    process lives (also a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


@contextlib.contextmanager
def paused(pid: int, timeout_s: float = 5.0, proc: Path = PROC) -> Iterator[None]:
    """``pid`` stopped with SIGSTOP for the block and continued (SIGCONT) after it, also on an
    error. The block starts only when ``/proc`` shows every thread of it stopped: the signal is
    delivered asynchronously, and a thread on a CPU (a broker's network thread) can still answer a
    request sent right after ``kill`` returned. A process that dies meanwhile is passed over."""
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + timeout_s
        while not _all_threads_stopped(pid, proc):
            if time.monotonic() > deadline:
                raise TimeoutError(f"pid {pid} not stopped {timeout_s:.0f}s after SIGSTOP")
            time.sleep(0.005)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def _all_threads_stopped(pid: int, proc: Path) -> bool:
    """Whether every thread of ``pid`` is stopped (state ``T``), or the process is gone."""
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return True
    for task in tasks:
        try:
            state = (task / "stat").read_text(encoding="ascii").rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue  # a thread that ended meanwhile
        if state not in ("T", "t", "Z", "X"):
            return False
    return True


def stop_processes(processes: Sequence[subprocess.Popen[bytes]], sig: int = signal.SIGTERM,
                   timeout_s: float = 20.0) -> list[int]:
    """Send ``sig`` to every running process at once, then wait for them together, SIGKILLing what still
    runs ``timeout_s`` after the signal; their exit statuses, in order. Shutdowns that wait on their
    own (a Kafka client leaving its group, a SparkSession stopping) overlap instead of adding up."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(sig)
    deadline = time.monotonic() + timeout_s
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return [process.returncode for process in processes]


def stop_process(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> int:
    """Send ``sig`` to a running ``process``, SIGKILL it after ``timeout_s``; its exit status."""
    return stop_processes([process], sig, timeout_s)[0]


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


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    """One process as ``/proc/<pid>/stat`` shows it."""

    pid: int
    parent: int
    cpu_seconds: float
    """User and system time of the process and of the children it reaped."""
    rss_bytes: int


def parse_stat(pid: int, text: str) -> ProcessUsage:
    """``/proc/<pid>/stat`` (proc(5)): after the command in parentheses come the state (field 3),
    the parent (4), utime, stime, cutime, cstime (14-17) and the resident pages (24)."""
    fields = text.rsplit(")", 1)[1].split()
    ticks = sum(int(value) for value in fields[11:15])
    return ProcessUsage(pid, int(fields[1]), ticks / _TICKS_PER_S, int(fields[21]) * _PAGE_BYTES)


def process_tree(root: int, proc: Path = PROC) -> list[ProcessUsage]:
    """``root`` and its descendants as ``proc`` shows them now, parents first (one that ends
    meanwhile is left out); empty when ``root`` is gone."""
    processes: dict[int, ProcessUsage] = {}
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "stat"), encoding="ascii", errors="replace") as stat:
                processes[int(entry.name)] = parse_stat(int(entry.name), stat.read())
        except (OSError, IndexError, ValueError):
            continue
    children: dict[int, list[int]] = {}
    for process in processes.values():
        children.setdefault(process.parent, []).append(process.pid)
    tree: list[ProcessUsage] = []
    todo = deque([root])
    while todo:
        process = processes.get(todo.popleft())
        if process is not None:
            tree.append(process)
            todo.extend(children.get(process.pid, ()))
    return tree


def tree_pids(root: int) -> list[int]:
    """The pids of ``root`` and its descendants, parents first."""
    return [process.pid for process in process_tree(root)]
