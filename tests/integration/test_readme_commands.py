"""Every command of README.md works as written, pasted into a plain shell, as a newcomer would paste it.

The commands are read from the README itself: each line of its ``sh`` blocks, its ``python`` block,
and each inline `.venv/bin/python ...` command, in the README's order. They run in bash with nothing
of this suite's environment (no DEBUG, SECRET_KEY, DATABASE_URL or REDIS_URL exported), in a copy of
the checkout with no .env and no database, one shell session long: what a line exports, later lines
see. The first command must be `make run`, which writes .env and sets up the demo.

A server (`make run`, `make serve`, `make worker`, `make beat`) runs in the background, as in a
terminal of its own, until the README starts another of its kind (`make serve` in place of
`make run`) or the end. Everything else must exit 0.

What this machine forces, and nothing else, is changed in the commands:
  - 127.0.0.1:8000 -> a free port (PORT is exported for make), so as not to meet another server;
    likewise the helper's 127.0.0.1:8001 (HELPER_PORT) and the relay's 127.0.0.1:8002 (RELAY_PORT);
  - the PostgreSQL and Redis URLs -> a fresh database on the suite's server, and a private Redis.
`make test` is not run: it is this suite. The copy shares the checkout's .venv (a link): `make`
finds it installed, as after the README's first command.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from django.db import connection
from psycopg import sql

from tests import services

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PLAIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DOCUMENTED_PORT = "127.0.0.1:8000"
DOCUMENTED_HELPER_PORT = "127.0.0.1:8001"
DOCUMENTED_RELAY_PORT = "127.0.0.1:8002"
DOCUMENTED_DATABASE = "postgres://postgres@127.0.0.1:5432/pfs"
DOCUMENTED_REDIS = "redis://127.0.0.1:6379/0"
SERVERS = {
    "make run": "web",
    "make serve": "web",
    "make worker": "worker",
    "make beat": "beat",
    "make helper": "helper",
    "make relay": "relay",
}
NOT_RUN = {"make test": "the whole suite: this test is part of it"}
# The environment bash gives any shell; not something a README line exported.
SHELL_OWN = {"PWD", "OLDPWD", "SHLVL", "_"}


@dataclass(frozen=True)
class Command:
    kind: str  # "sh" (one line of a sh block), "python" (a whole python block), "inline"
    text: str


def readme_commands(text: str) -> list[Command]:
    """The README's commands in document order: sh lines, python blocks, inline .venv/bin/python."""
    commands: list[Command] = []
    fence = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
    position = 0
    for block in fence.finditer(text):
        commands += _inline(text[position : block.start()])
        language, body = block.group(1), block.group(2)
        if language in ("sh", "bash", "shell"):
            commands += [Command("sh", line) for line in body.splitlines() if line.strip() and not line.startswith("#")]
        elif language == "python":
            commands.append(Command("python", body))
        position = block.end()
    return commands + _inline(text[position:])


def _inline(prose: str) -> list[Command]:
    return [Command("inline", " ".join(code.split())) for code in re.findall(r"`(\.venv/bin/python [^`]+)`", prose)]


def test_the_readme_is_read_whole() -> None:
    """The reader finds what a newcomer sees; if the README's layout changes, this says so first."""
    commands = readme_commands((ROOT / "README.md").read_text())
    assert commands[0] == Command(
        "sh", "make run    # installs into .venv, writes .env, migrates, seeds the demo, serves http://127.0.0.1:8000"
    )
    kinds = {c.kind for c in commands}
    assert kinds == {"sh", "python", "inline"}
    texts = [c.text.split("#")[0].strip() for c in commands]
    for expected in (
        "make test",
        "make setup",
        "make worker",
        "make beat",
        "make serve",
        ".venv/bin/python manage.py worker_health",
    ):
        assert expected in texts, expected


class Session:
    """One bash session's environment, carried from line to line; its servers in the background."""

    def __init__(self, copy: Path, env: dict[str, str], logs: Path, rewrites: dict[str, str]) -> None:
        self.copy, self.env, self.logs, self.rewrites = copy, env, logs, rewrites
        self.servers: dict[str, services.Background] = {}
        self.ran: list[str] = []

    def rewrite(self, text: str) -> str:
        for documented, here in self.rewrites.items():
            text = text.replace(documented, here)
        return text

    def run(self, command: Command) -> None:
        text = self.rewrite(command.text)
        line = text.split(" #")[0].strip() if command.kind == "sh" else text
        if line in NOT_RUN:
            return
        self.ran.append(line)
        if line in SERVERS:
            self.serve(line)
        elif command.kind == "python":
            self.foreground([".venv/bin/python", "-"], stdin=text, what="the README's python block")
        else:
            self.shell(text)

    def shell(self, text: str) -> None:
        """Run a line in bash; keep what it exported for the lines after it."""
        env_file = self.logs / "env.after"
        script = f"{text}\n__status=$?\nenv -0 > {shlex.quote(str(env_file))}\nexit $__status\n"
        self.foreground(["bash", "-c", script], what=text)
        exported = dict(item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
        self.env = {k: v for k, v in exported.items() if k not in SHELL_OWN}

    def foreground(self, argv: list[str], *, what: str, stdin: str | None = None) -> None:
        result = subprocess.run(
            argv, cwd=self.copy, env=self.env, input=stdin, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, (
            f"`{what}` exited with {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
        )

    def serve(self, line: str) -> None:
        role = SERVERS[line]
        if role in self.servers:  # the README starts this one in place of the one before
            self.servers.pop(role).stop()
        name = f"{len(self.ran):02d}-{line.replace(' ', '-')}"
        server = services.Background(line, cwd=self.copy, env=self.env, log_path=self.logs / f"{name}.log")
        self.servers[role] = server
        port = self.env["PORT"]
        if role == "web":
            server.wait_for(
                lambda: services.http_status(f"http://127.0.0.1:{port}/healthz") == 200, timeout=300, what="/healthz"
            )
            readiness = services.http_status(f"http://127.0.0.1:{port}/readyz")
            assert readiness == 200, f"{line}: /readyz answered {readiness}"  # with Redis: a worker answers too
            if line == "make run":  # the helper aggregator's own service, a second process beside it
                helper = f"http://127.0.0.1:{self.env['HELPER_PORT']}"
                server.wait_for(
                    lambda: services.http_status(f"{helper}/hpke_config") == 200, timeout=60, what="the helper"
                )
                assert services.http_status(f"{helper}/login/") == 404, "the helper serves no page of the leader's"
                # and the relay, a third process, with its copy of the leader's gateway key
                relay = f"http://127.0.0.1:{self.env['RELAY_PORT']}"
                server.wait_for(
                    lambda: services.http_status(f"{relay}/leader/api/ohttp/keys") == 200, timeout=60, what="the relay"
                )
                assert services.http_status(f"{relay}/login/") == 404, "the relay serves nothing of the leader's"
        elif role == "helper":  # alone, as on a host of its own; make run's (stopped with it) is gone
            helper = f"http://127.0.0.1:{self.env['HELPER_PORT']}"
            server.wait_for(lambda: services.http_status(f"{helper}/readyz") == 200, timeout=120, what="the helper")
            assert services.http_status(f"{helper}/login/") == 404, "the helper serves no page of the leader's"
        elif (
            role == "relay"
        ):  # alone, as on a third operator's host: its copy of the leader's key comes from `make serve`
            relay = f"http://127.0.0.1:{self.env['RELAY_PORT']}"
            server.wait_for(
                lambda: services.http_status(f"{relay}/leader/api/ohttp/keys") == 200, timeout=60, what="the relay"
            )
        elif role == "worker":
            server.wait_for(self.worker_answers, timeout=120, what="an answer to worker_health")
        else:
            server.wait_for(lambda: "beat: Starting" in server.output(), timeout=60, what="beat's start")

    def worker_answers(self) -> bool:
        argv = [".venv/bin/python", "manage.py", "worker_health", "--timeout", "1"]
        return subprocess.run(argv, cwd=self.copy, env=self.env, capture_output=True, timeout=60).returncode == 0

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()


def checkout_copy(destination: Path) -> None:
    """The checkout's files (tracked, and new ones not ignored) as a fresh clone has them, without
    .env, var/ or a database; .venv is a link to the checkout's, installed already."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source, target = ROOT / name, destination / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree, not yet in git
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            target.write_bytes(source.read_bytes())
            os.utime(target, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns))  # make sees it built
    (destination / ".venv").symlink_to(ROOT / ".venv")


def test_every_readme_command_works_pasted_into_a_plain_shell(tmp_path: Path) -> None:
    if connection.vendor != "postgresql":
        pytest.fail("the README's PostgreSQL commands need one: `make test` finds or starts it (DATABASE_URL)")
    server = connection.settings_dict
    database = f"pfs_readme_{secrets.token_hex(4)}"
    user = server["USER"] or "postgres"
    password = f":{server['PASSWORD']}" if server["PASSWORD"] else ""
    fresh_database = f"postgres://{user}{password}@{server['HOST'] or '127.0.0.1'}:{server['PORT'] or 5432}/{database}"
    redis_server = services.PrivateRedis(tmp_path)
    redis_server.start()
    port, helper_port, relay_port = (str(services.free_port()) for _ in range(3))
    copy, home, logs = tmp_path / "checkout", tmp_path / "home", tmp_path / "logs"
    for folder in (copy, home, logs):
        folder.mkdir()
    checkout_copy(copy)
    session = Session(
        copy,
        {
            "PATH": PLAIN_PATH,
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "PORT": port,
            "HELPER_PORT": helper_port,
            "RELAY_PORT": relay_port,
        },
        logs,
        {
            DOCUMENTED_PORT: f"127.0.0.1:{port}",
            DOCUMENTED_HELPER_PORT: f"127.0.0.1:{helper_port}",
            DOCUMENTED_RELAY_PORT: f"127.0.0.1:{relay_port}",
            DOCUMENTED_DATABASE: fresh_database,
            DOCUMENTED_REDIS: redis_server.url,
        },
    )
    commands = readme_commands((ROOT / "README.md").read_text())
    try:
        for command in commands:
            session.run(command)
        # What the README says of what ran: the production profile serves its hashed, compressed files.
        static = (copy / "var" / "static" / "staticfiles.json").read_text()
        plotly = re.search(r'"vendor/plotly\.min\.js": "([^"]+)"', static)[1]
        _, headers, _ = _get(f"http://127.0.0.1:{port}/static/{plotly}", {"Accept-Encoding": "gzip"})
        assert headers["Content-Encoding"] == "gzip" and "immutable" in headers["Cache-Control"]
        assert (copy / "perplexity.csv").read_text().startswith("cohort,bucket,estimate")
        assert "DEBUG=1" in (copy / ".env").read_text()
    finally:
        session.stop()
        redis_server.kill()
        _drop(server, database)
        _drop(server, f"{database}_issuer")  # the issuer's own store, beside it
        _drop(server, f"{database}_helper")  # and the helper's
    assert session.ran[0] == "make run" and len(session.ran) == len(commands) - len(NOT_RUN), session.ran


def _get(url: str, headers: dict[str, str]):
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=15) as answer:  # noqa: S310
        return answer.status, dict(answer.headers), answer.read()


def _drop(server: dict, database: str) -> None:
    with psycopg.connect(
        host=server["HOST"] or "127.0.0.1",
        port=server["PORT"] or 5432,
        user=server["USER"] or "postgres",
        password=server["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    ) as maintenance:
        maintenance.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
