"""The child processes ``sana up`` starts: free ports for them, their death with the parent, their stop."""

from __future__ import annotations

import ctypes
import signal
import socket
import subprocess


def port_free(host: str, port: int) -> bool:
    """Whether ``port`` can be bound on ``host`` now (with SO_REUSEADDR, as servers bind: a port in TIME_WAIT is free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free on ``host`` now (held open together while they are picked)."""
    probes = []
    try:
        for _ in range(count):
            probe = socket.socket()
            probe.bind((host, 0))
            probes.append(probe)
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the launcher dies (Linux)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def terminate(process: subprocess.Popen | None, timeout: float) -> None:
    """SIGTERM, then SIGKILL if ``process`` has not exited within ``timeout`` seconds; nothing if it has exited."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
