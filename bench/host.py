"""The machine a bench ran on, as its results tables state it, and stopping the servers a bench starts."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
from pathlib import Path


def _first(path: str, prefix: str, default: str) -> str:
    lines = Path(path).read_text().splitlines() if Path(path).exists() else []
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(prefix)), default)


def describe(*, tasks: str, memory: bool = False, database: str = "SQLite") -> str:
    """e.g. "2 cores (AMD EPYC ...), 24 GiB, Python 3.11.7, numpy 2.4.6, SQLite, tasks inline"."""
    import numpy

    parts = [f"{os.cpu_count()} cores ({_first('/proc/cpuinfo', 'model name', platform.processor())})"]
    if memory:
        kib = int(_first("/proc/meminfo", "MemTotal", "0 kB").split()[0])
        parts.append(f"{kib / 2**20:.0f} GiB")
    parts += [f"Python {platform.python_version()}", f"numpy {numpy.__version__}", database, tasks]
    return ", ".join(parts)


def process_group_stop(process: subprocess.Popen, *, timeout: float = 20) -> None:
    """SIGTERM a server started in a process group of its own (start_new_session=True), with its
    workers; SIGKILL if it has not exited within ``timeout`` seconds."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
