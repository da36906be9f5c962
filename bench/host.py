"""The machine a bench ran on, as its results tables state it; the helper aggregator's service a bench
runs beside the leader; and stopping the servers a bench starts."""

from __future__ import annotations

import os
import platform
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


def results_header(title: str, *, machine: str, context: dict, busy: str) -> list[str]:
    """The first lines of a results table: the title, the machine, the load around the run (with
    ``busy`` when other work shared the cores) and the command that reproduces it."""
    return [
        f"# {title}",
        "",
        f"Machine: {machine}. Date: {time.strftime('%Y-%m-%d')}.",
        f"Load average (1, 5, 15 min) before the run: {context['load_before']}; after: {context['load_after']}."
        + (f" **Measured while other work shared the two cores**: {busy}" if context["busy"] else ""),
        "",
        "Reproduce:",
        "",
        "```",
        context["command"],
        "```",
        "",
    ]


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


@dataclass(frozen=True)
class HelperService:
    url: str
    process: subprocess.Popen

    def cpu_seconds(self) -> float:
        """CPU seconds its processes (gunicorn's master and workers, one process group) used so far."""
        return group_cpu_seconds(self.process.pid)


def group_cpu_seconds(group: int) -> float:
    """CPU seconds the live processes of process group ``group`` used so far (a server started with
    start_new_session=True: its group is its master's pid), read from /proc."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # a process that just ended
            continue
        if int(fields[2]) == group:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def machine_cpu_seconds() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine since boot, every core, from /proc/stat."""
    fields = [int(field) for field in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    total = sum(fields[:8])  # user … steal (guest time is already in user)
    return (total - idle) / os.sysconf("SC_CLK_TCK"), total / os.sysconf("SC_CLK_TCK")


@contextmanager
def helper_service(
    folder: Path, *, secret: str, database_url: str = "", workers: int = 2, **extra: str
) -> Iterator[HelperService]:
    """The helper aggregator as its own service, as `make helper` and Procfile.helper start it: its
    store migrated, then gunicorn with ``pfs_web.settings_helper`` in a process group of its own.
    Yields it (its URL); on the way out (a failure included) it is stopped with its workers.

    ``folder``: where its log, its metrics and (without ``database_url``) its SQLite store go;
    ``secret``: PFS_AGGREGATOR_AUTH_SECRET, the leader's must be the same; ``extra``: more of its
    environment (e.g. PFS_HELPER_KEY).
    """
    root = Path(__file__).resolve().parent.parent
    metrics = folder / "helper-metrics"
    metrics.mkdir()
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DJANGO_SETTINGS_MODULE": "pfs_web.settings_helper",
        "PFS_ENV_FILE": os.devnull,  # nothing from this checkout's .env
        "SECRET_KEY": "bench-helper-secret-key",
        "DEBUG": "0",
        "ALLOWED_HOSTS": "127.0.0.1",
        "HELPER_DATABASE_URL": database_url or f"sqlite:///{folder / 'helper.sqlite3'}",
        "PFS_AGGREGATOR_AUTH_SECRET": secret,
        "PROMETHEUS_MULTIPROC_DIR": str(metrics),
        "PFS_BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": str(workers),
        "LOG_LEVEL": "WARNING",
        **extra,
    }
    migrate = [sys.executable, "manage.py", "migrate", "--database", "helper", "--noinput"]
    subprocess.run(migrate, cwd=root, env=env, check=True, capture_output=True, timeout=120)
    log_path = folder / "helper.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "--name", "pfs-helper"],
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_healthy(process, url, log_path)
            yield HelperService(url, process)
        finally:
            process_group_stop(process)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_healthy(process: subprocess.Popen, url: str, log_path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the helper exited with {process.returncode}: {log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as answer:  # noqa: S310 - loopback
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the helper did not answer /healthz within {timeout:.0f} s: {log_path.read_text()[-3000:]}")
