"""Benchmark: uploads through the Oblivious HTTP relay and gateway against direct uploads, in one run.

Issue 33, requirement 5: uploads per second through relay and gateway against direct uploads, in
the same run; the relay must not become the bottleneck of the 1,500 reports/s the two aggregators
verify (issue 28, bench/results/upload_prio3.md).

One leader (pfs_web on gunicorn, ``--leader`` worker class and workers, 4 threads each, DEBUG=0,
tasks inline: the upload path sends no verification task) serves a private PostgreSQL database
(default ``pfs_bench_relay``, dropped, created and migrated anew) and a Redis database of its own,
with the helper aggregator as its own service beside it: bench/upload.py's set-up
(``leader_ready``). A pool of reports (8 buckets, asymmetric OHE, a blind-signed token each) is
sealed beforehand by the device code (bench/upload_setup.py's ``write_bodies``); each is then
written as the SDK writes an upload through a relay (pfs_device.sdk.relay: a Binary HTTP
``POST /api/device/reports/``) and encapsulated afresh to the gateway key the leader serves at
``/api/ohttp/keys`` (pfs_device.ohttp). wrk (bench/upload.py's Lua script) cycles through the pool,
so the same capsules are replayed: the gateway keeps no record of capsules and acceptance does not
verify reports, so every replay is stored as an upload. The paths, each measured at every
``--connections`` against the same leader, interleaved (in the order below, for one connection
count after the other):

- **direct**: the JSON bodies POSTed to ``/api/device/reports/`` (pfs_web.wsgi's fast path, no
  Django middleware), answered 202 — bench/upload.py's measurement (a);
- **gateway**: the capsules POSTed (``message/ohttp-req``) straight to the leader's ``/api/ohttp/``:
  HPKE open, Binary HTTP, the upload in-process, the answer sealed, through Django;
- **gateway, key in PFS_LEADER_KEY**: the same to a second leader, the same but for its key (the
  same key) given in its environment instead of read from its database row: the gateway then reads
  no key row per capsule;
- **relay**: the capsules POSTed to ``python -m pfs_relay`` (its own gunicorn, gthread, each of
  ``--relays`` workers × threads), which forwards each to the leader's gateway;
- **relay → stub**: the same relay forwarding to a gateway that costs next to nothing (nginx
  answering every capsule at once with a fixed body): the relay's own ceiling on this machine.

For each: reports/s and wrk's latency percentiles; every answer must be 202 (direct) or 200
(capsules); the PendingReport rows stored during the run (at least the answers, at most the
answers and the requests still in flight when wrk stopped); ``--samples`` capsules of the pool
sent once more after the run and their answers opened (decapsulated, Binary HTTP decoded: the
inner status must be 202); CPU ms per answer of the leader's gunicorn, the relay's and wrk (from
/proc), how many of the cores the machine kept busy, and the 1-minute load average before and
after. Then where the time goes: each server-side step timed in this process.

Needs PostgreSQL and Redis on 127.0.0.1 (as bench/upload.py), wrk and nginx (``apt-get install -y
wrk nginx-light``). Writes bench/results/upload_relay.md (or ``--out``). Traffic goes to 127.0.0.1
only. About four minutes with the defaults on the 2-core machine.

    .venv/bin/python bench/upload_relay.py                                   # the committed table
    .venv/bin/python bench/upload_relay.py --relays 1x16 --connections 32 --seconds 5 --out /tmp/relay.md
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import random
import resource
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

from host import describe, group_cpu_seconds, machine_cpu_seconds  # bench/host.py: this folder is on sys.path
from upload import (
    PY,
    ROOT,
    UPLOAD_PATH,
    WARM_SECONDS,
    WRK_THREADS,
    Gunicorn,
    Server,
    describe_config,
    leader_ready,
    lua_script,
    versions,
    warm,
    wrk,
    wrk_answers,
)
from upload_setup import VAR, counts, setup, write_bodies

TARGET_RATE = 1_500  # reports/s both aggregators verify (issue 28; bench/results/upload_prio3.md)
GATEWAY_PATH = "/api/ohttp/"
KEYED = "gateway, key in PFS_LEADER_KEY"
CAPSULE_TYPE = "message/ohttp-req"  # pfs_device.ohttp.REQUEST_MEDIA_TYPE
ANSWER_TYPE = "message/ohttp-res"
STEPS_COUNT = 300  # capsules timed step by step in this process
STEP_GATEWAY = "gateway: pfs_web.wsgi, the fast path (gateway_application), all of it"
STEP_GATEWAY_ANSWER = "gateway_answer"
STEP_RELAY = "relay: pfs_relay.relay.Relay, the WSGI application alone, forwarding to the stub (no gunicorn)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leader", default="gthread:2", help="the leader's gunicorn, worker class:workers")
    parser.add_argument("--relays", default="1x16,2x16", help="the relay's workers x threads, comma-separated")
    parser.add_argument("--connections", default="32,64", help="wrk connections, comma-separated")
    parser.add_argument("--seconds", type=int, default=10, help="wrk duration per run")
    parser.add_argument("--pool", type=int, default=1000, help="distinct sealed reports, and capsules, wrk cycles")
    parser.add_argument("--samples", type=int, default=20, help="answers opened after each capsule run")
    parser.add_argument("--database", default="pfs_bench_relay")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/11")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "upload_relay.md"))
    options = parser.parse_args()
    if shutil.which("wrk") is None or not Path(shutil.which("nginx") or "/usr/sbin/nginx").exists():
        sys.exit("wrk and nginx are needed: apt-get install -y wrk nginx-light")
    with leader_ready(options.database, options.redis) as (env, _helper, _helper_key):
        measure(options, env)


def measure(options, env: dict[str, str]) -> None:
    from aggregation.aggregators import LEADER

    worker_class, workers = options.leader.split(":")
    relays = [tuple(int(n) for n in config.split("x")) for config in options.relays.split(",")]
    connections = [int(c) for c in options.connections.split(",")]
    load_start = os.getloadavg()
    (key,) = setup(1)
    script = lua_script()
    started = time.monotonic()
    bodies = write_bodies(key, options.pool)
    sealing = time.monotonic() - started
    runs = []
    # The same leader again, its key (the same, read from its row here) given in PFS_LEADER_KEY as
    # docs/deployment.md allows: the gateway then reads no key row per capsule.
    keyed = {**env, "PFS_LEADER_KEY": base64.b64encode(LEADER.private_key()).decode()}
    with (
        Gunicorn(worker_class, int(workers), env) as leader,
        Gunicorn(worker_class, int(workers), keyed) as leader_keyed,
        StubGateway() as stub,
    ):
        config = gateway_config(leader.port)
        assert gateway_config(leader_keyed.port) == config
        pool = capsules_write(config, bodies)
        direct = {"name": "direct", "port": leader.port, "path": UPLOAD_PATH, "bodies": bodies, "upstream": leader}
        gateway = {"name": "gateway", "port": leader.port, "path": GATEWAY_PATH, "pool": pool, "upstream": leader}
        gateway_keyed = {**gateway, "name": KEYED, "port": leader_keyed.port, "upstream": leader_keyed}
        warm(leader.port, script, bodies)
        capsules_send(gateway, script, connections=64, seconds=WARM_SECONDS)
        capsules_send(gateway_keyed, script, connections=64, seconds=WARM_SECONDS)
        for count in connections:
            runs.append(measured(direct, options, key, script, count))
            runs.append(measured(gateway, options, key, script, count))
            runs.append(measured(gateway_keyed, options, key, script, count))
            for upstream, name in ((leader, "relay"), (stub, "relay → stub")):
                for relay_workers, threads in relays:
                    with Relay(upstream.port, relay_workers, threads) as relay:
                        through = {"name": name, "port": relay.port, "path": "/", "pool": pool}
                        through.update(relay=relay, upstream=upstream, stub=upstream is stub)
                        capsules_send(through, script, connections=count, seconds=WARM_SECONDS)
                        runs.append(measured(through, options, key, script, count))
        steps = server_steps(pool, bodies, stub.port)
    load_end = os.getloadavg()
    write(Path(options.out), options, runs, steps, pool, sealing, (load_start, load_end))


# ---------------------------------------------------------------- the relay, the capsules


class Relay(Server):
    """``python -m pfs_relay`` forwarding to the leader: its own gunicorn, nothing of the project's
    environment (it needs none)."""

    name = "relay"

    def __init__(self, leader_port: int, workers: int, threads: int) -> None:
        self.leader_port, self.workers, self.threads = leader_port, workers, threads
        super().__init__({"PATH": os.environ.get("PATH", "/usr/bin:/bin")})

    def argv(self) -> list[str]:
        argv = [PY, "-m", "pfs_relay", "--leader", f"http://127.0.0.1:{self.leader_port}", "--bind"]
        return argv + [f"127.0.0.1:{self.port}", "--workers", str(self.workers), "--threads", str(self.threads)]

    def describe(self) -> str:
        return f"{self.workers} worker{'s' if self.workers > 1 else ''} × {self.threads} threads"


# A gateway that costs next to nothing: nginx answering every capsule at once with a fixed body of
# a sealed answer's size (not one a device could open), so that the relay's own ceiling shows.
STUB_CONF = """
daemon off;
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {folder}/body;
  keepalive_timeout 60s;
  keepalive_requests 1000000;
  server {{
    listen 127.0.0.1:{port};
    location = {path} {{
      default_type {answer_type};
      add_header Cache-Control "private, no-store";
      return 200 "{answer}";
    }}
  }}
}}
"""


class StubGateway(Server):
    """nginx (STUB_CONF) in a process group of its own, its files in var/bench-upload-stub/."""

    name = "stub"

    def __init__(self) -> None:
        self.folder = VAR / "bench-upload-stub"
        self.folder.mkdir(parents=True, exist_ok=True)
        super().__init__({"PATH": os.environ.get("PATH", "/usr/bin:/bin")})

    def argv(self) -> list[str]:
        conf = self.folder / "nginx.conf"
        answer = "x" * 86  # near a sealed 202's 101 bytes (response nonce, Binary HTTP, AEAD tag)
        conf.write_text(
            STUB_CONF.format(
                folder=self.folder, port=self.port, path=GATEWAY_PATH, answer_type=ANSWER_TYPE, answer=answer
            )
        )
        return [shutil.which("nginx") or "/usr/sbin/nginx", "-c", str(conf), "-p", str(self.folder)]


def gateway_config(port: int):
    """The gateway's key configuration, as a device fetches it (pfs_device.sdk.relay)."""
    from pfs_device.sdk.relay import GATEWAY_KEYS_PATH, gateway_config_fetch

    return gateway_config_fetch(f"http://127.0.0.1:{port}{GATEWAY_KEYS_PATH}")[0]


def capsules_write(config, bodies: Path) -> dict:
    """Each sealed report as the SDK sends it through a relay (pfs_device.sdk.relay.exchange), a
    fresh encapsulation each, written length-prefixed for the Lua script. The capsules, their
    response keyings (to open the answers), the file, and the device's CPU per encapsulation."""
    from pfs_device import bhttp, ohttp
    from pfs_device.sdk.relay import USER_AGENT

    headers = ((b"content-type", b"application/json"), (b"accept", b"application/json"))
    headers += ((b"user-agent", USER_AGENT.encode()),)
    capsules, keyings, seconds = [], [], []
    for body in bodies.read_bytes().splitlines():
        started = time.process_time()
        inner = bhttp.Request(
            method=b"POST", scheme=b"https", authority=b"", path=UPLOAD_PATH.encode(), headers=headers, content=body
        )
        capsule, keying = ohttp.request_encapsulate(config, bhttp.request_encode(inner))
        seconds.append(time.process_time() - started)
        capsules.append(capsule)
        keyings.append(keying)
    path = VAR / "bench-upload-relay.capsules"
    path.write_bytes(b"".join(len(capsule).to_bytes(4, "big") + capsule for capsule in capsules))
    seconds.sort()
    return {
        "capsules": capsules,
        "keyings": keyings,
        "file": path,
        "seal_ms": 1e3 * seconds[len(seconds) // 2],
        "body_bytes": len(bodies.read_bytes()) / len(capsules) - 1,
        "capsule_bytes": sum(map(len, capsules)) / len(capsules),
    }


def capsules_send(target: dict, script: Path, *, connections: int, seconds: int) -> dict:
    return wrk(
        target["port"],
        script,
        target["pool"]["file"],
        connections=connections,
        seconds=seconds,
        path=target["path"],
        media_type=CAPSULE_TYPE,
        framed=True,
    )


def answers_open(target: dict, count: int) -> Counter:
    """``count`` capsules of the pool sent once more, one by one; their answers opened. The inner
    statuses (or what went wrong on the way)."""
    from pfs_device import bhttp, ohttp

    pool, statuses = target["pool"], Counter()
    connection = http.client.HTTPConnection("127.0.0.1", target["port"], timeout=30)
    for index in random.Random(count).sample(range(len(pool["capsules"])), count):
        connection.request("POST", target["path"], body=pool["capsules"][index], headers={"Content-Type": CAPSULE_TYPE})
        response = connection.getresponse()
        sealed = response.read()
        if response.status != 200 or response.getheader("Content-Type") != ANSWER_TYPE:
            statuses[f"outer {response.status}"] += 1
            continue
        try:
            statuses[str(bhttp.response_decode(ohttp.response_decapsulate(pool["keyings"][index], sealed)).status)] += 1
        except (ohttp.OhttpError, bhttp.BinaryHttpError):
            statuses["not opened"] += 1
    connection.close()
    return statuses


# ---------------------------------------------------------------- one measured run


def measured(target: dict, options, key: str, script: Path, connections: int) -> dict:
    """One wrk run of ``options.seconds`` against ``target``, with what it stored, its answers
    opened, the CPU of the processes on its way and the load around it."""
    relay, stub = target.get("relay"), target.get("stub", False)
    stored = _settled(key)  # the warm-up's requests still in flight stored first
    load_before = os.getloadavg()[0]
    before = _cpu(target["upstream"], relay)
    if "pool" in target:
        result = capsules_send(target, script, connections=connections, seconds=options.seconds)
    else:
        result = wrk(target["port"], script, target["bodies"], connections=connections, seconds=options.seconds)
    after = _cpu(target["upstream"], relay)
    result.update(
        path=target["name"],
        relay=relay.describe() if relay else "",
        connections=connections,
        stored=None if stub else _settled(key) - stored,  # with the requests in flight when wrk stopped
        load=(load_before, os.getloadavg()[0]),
        cores_busy=(after["busy"] - before["busy"]) / (after["all"] - before["all"]) * os.cpu_count(),
        cpu_ms={name: 1e3 * (after[name] - before[name]) / result["requests"] for name in ("upstream", "relay", "wrk")},
    )
    result["opened"] = dict(answers_open(target, options.samples)) if "pool" in target and not stub else {}
    print(json.dumps(result), flush=True)
    return result


def _settled(key: str) -> int:
    """The collection's PendingReport rows, once their count stays the same for a quarter of a second."""
    last = counts(key)["pending"]
    while True:
        time.sleep(0.25)
        now = counts(key)["pending"]
        if now == last:
            return now
        last = now


def _cpu(upstream: Server, relay: Relay | None) -> dict[str, float]:
    busy, every = machine_cpu_seconds()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # wrk: the only child reaped during a run
    return {
        "upstream": group_cpu_seconds(upstream.process.pid),
        "relay": group_cpu_seconds(relay.process.pid) if relay else 0.0,
        "wrk": children.ru_utime + children.ru_stime,
        "busy": busy,
        "all": every,
    }


# ---------------------------------------------------------------- where the time goes


def server_steps(pool: dict, bodies: Path, stub_port: int) -> dict[str, tuple[float, float]]:
    """(CPU ms, wall ms) per report of each server-side step, in this process against the bench's
    stores, STEPS_COUNT reports each: the whole WSGI application (pfs_web.wsgi) on a direct upload
    and on a capsule, the gateway's parts (aggregation.gateway) one by one, and the relay's WSGI
    application forwarding to the stub on ``stub_port``."""
    import io

    from aggregation import gateway, intake
    from pfs_device import bhttp, ohttp
    from pfs_relay.relay import Relay as RelayApplication
    from pfs_web.wsgi import application

    relay = RelayApplication(f"http://127.0.0.1:{stub_port}")

    capsules = pool["capsules"][:STEPS_COUNT]
    reports = bodies.read_bytes().splitlines()[:STEPS_COUNT]
    meta = {"REMOTE_ADDR": "127.0.0.1"}

    def environ(path: str, media_type: str, body: bytes) -> dict:
        return {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": path,
            "SCRIPT_NAME": "",
            "QUERY_STRING": "",
            "CONTENT_TYPE": media_type,
            "CONTENT_LENGTH": str(len(body)),
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "127.0.0.1:8000",
            "REMOTE_ADDR": "127.0.0.1",
            "wsgi.input": io.BytesIO(body),
            "wsgi.url_scheme": "http",
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
            "wsgi.version": (1, 0),
        }

    def served(path: str, media_type: str, body: bytes, expected: str) -> None:
        statuses = []
        answer = application(environ(path, media_type, body), lambda status, _h, *_: statuses.append(status))
        b"".join(answer)
        getattr(answer, "close", lambda: None)()  # as gunicorn does: Django's request_finished
        assert statuses[0].startswith(expected), statuses

    key = gateway.gateway_keys()[0]
    opened = [gateway._decapsulate(capsule) for capsule in capsules]  # the inner requests, for the later steps
    inner = [bhttp.request_decode(message) for message, _ in opened]
    answer = bhttp.Response(status=202, headers=((b"content-type", b"application/json"),), content=b"{}")
    steps = {
        "direct: pfs_web.wsgi, the fast path (upload_answer)": (
            reports,
            lambda body: served(UPLOAD_PATH, "application/json", body, "202"),
        ),
        STEP_GATEWAY: (
            capsules,
            lambda capsule: served(GATEWAY_PATH, CAPSULE_TYPE, capsule, "200"),
        ),
        STEP_GATEWAY_ANSWER: (capsules, lambda capsule: gateway.gateway_answer(meta, capsule)),
        "… the gateway's keys, one read of the store (gateway.gateway_keys: at most once a second)": (
            capsules,
            lambda _: gateway.gateway_keys(),
        ),
        "… HPKE open, the key at hand (ohttp.request_decapsulate)": (
            capsules,
            lambda capsule: ohttp.request_decapsulate(capsule, config=key.config, private_key=key.private_key),
        ),
        "… Binary HTTP decode": ([message for message, _ in opened], bhttp.request_decode),
        "… upload_answer (parse, INSERT, rate count)": (
            [request.content for request in inner],
            lambda body: intake.upload_answer({**meta, "CONTENT_LENGTH": str(len(body))}, lambda _n: body),
        ),
        "… the answer sealed (Binary HTTP, AEAD)": (
            [keying for _, keying in opened],
            lambda keying: ohttp.response_encapsulate(keying, bhttp.response_encode(answer)),
        ),
        STEP_RELAY: (capsules, lambda capsule: relay(environ("/", CAPSULE_TYPE, capsule), lambda *_: None)),
    }
    timed = {}
    for name, (items, step) in steps.items():
        for item in items[:10]:  # untimed: the first calls' imports and caches
            step(item)
        cpu, wall = time.process_time(), time.perf_counter()
        for item in items:
            step(item)
        timed[name] = (1e3 * (time.process_time() - cpu) / len(items), 1e3 * (time.perf_counter() - wall) / len(items))
    return timed


# ---------------------------------------------------------------- the table


def write(path: Path, options, runs, steps, pool, sealing, loads) -> None:
    postgres, wrk_version = versions()
    command = (
        f"`.venv/bin/python bench/upload_relay.py --leader {options.leader} --relays {options.relays} "
        f"--connections {options.connections} --seconds {options.seconds} --pool {options.pool}`"
    )
    leader_class, leader_workers = options.leader.split(":")
    machine = describe(tasks="gunicorn, Redis on loopback", memory=True, database=f"PostgreSQL {postgres}")
    lines = [
        "# Uploads through the Oblivious HTTP relay and gateway, against direct uploads",
        "",
        f"Machine: {machine}. Date: {time.strftime('%Y-%m-%d')}. Load average (1, 5, 15 min) at the start: "
        f"{' '.join(f'{x:.2f}' for x in loads[0])}; at the end: {' '.join(f'{x:.2f}' for x in loads[1])}.",
        "",
        f"{command}: {options.pool:,} reports sealed beforehand by the device code (8 buckets, asymmetric OHE, "
        f"a blind-signed token each; {sealing:.0f} s), each written as a Binary HTTP `POST {UPLOAD_PATH}` and "
        f"encapsulated afresh to the gateway's key from `/api/ohttp/keys` ({pool['seal_ms']:.2f} ms of CPU at the "
        f"median; {pool['body_bytes']:,.0f} bytes of JSON a report, {pool['capsule_bytes']:,.0f} a capsule). "
        f"wrk {wrk_version} ({WRK_THREADS} threads, bench/upload.py's Lua script) cycles through them for "
        f"{options.seconds} s a run against one leader: gunicorn, "
        f"{describe_config(leader_class, int(leader_workers))}, DEBUG=0, tasks inline (no verification), "
        "the leader's key in its database (the default: `PFS_LEADER_KEY` and `PFS_LEADER_KEY_FILE` unset). "
        "**direct**: the JSON bodies to `/api/device/reports/` (pfs_web.wsgi's fast path). **gateway**: the "
        "capsules (`message/ohttp-req`) to the leader's `/api/ohttp/`. **gateway, key in PFS_LEADER_KEY**: the "
        "same to a second leader, the same but for its key (the same key) given in its environment, as "
        "docs/deployment.md allows (its gunicorn started beside the first, idle while the other rows run). "
        "**relay**: the capsules to "
        "`python -m pfs_relay` (gunicorn gthread, its own process group), forwarding to the same gateway. "
        "**relay → stub**: the same relay forwarding to a gateway that costs next to nothing (nginx answering "
        "every capsule 200 with a fixed body at once): the relay's own ceiling on this machine. Run in the "
        f"order of the table; the relay started afresh for each row, with a {WARM_SECONDS} s warm-up. wrk, the "
        "leader, the relay, nginx, the helper (idle), PostgreSQL and Redis share the cores.",
        "",
        "Answers: wrk's count of each status. Stored: PendingReport rows added during the run (the answers, "
        "and up to one request per connection still in flight when wrk stopped). Opened: after each capsule "
        f"run, {options.samples} capsules of the pool sent once more and their sealed answers decapsulated "
        "(the inner status). CPU ms/report: the CPU time during the run over the answers (/proc) of the "
        "upstream (the leader's gunicorn, master and workers; nginx for the stub), of the relay's gunicorn "
        "and of wrk. Cores busy: the machine's, all "
        "processes (PostgreSQL, Redis and anything else running included). Load: the 1-minute load average "
        "before → after the run.",
        "",
        "| path | relay | connections | answers | stored | opened | reports/s | p50 ms | p90 ms | p99 ms | "
        "max ms | CPU ms/report upstream / relay / wrk | cores busy | load |",
        "|---|---|---:|---|---:|---|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in runs:
        answers = wrk_answers(r)
        opened = ", ".join(f"{n} × {s}" for s, n in sorted(r["opened"].items())) or "—"
        cpu = r["cpu_ms"]
        relay_cpu = f"{cpu['relay']:.2f}" if r["relay"] else "—"
        stored = "—" if r["stored"] is None else f"{r['stored']:,}"
        lines.append(
            f"| {r['path']} | {r['relay'] or '—'} | {r['connections']} | {answers} | {stored} | {opened} | "
            f"{r['rate']:,.0f} | {r['p50_ms']:.1f} | {r['p90_ms']:.1f} | {r['p99_ms']:.1f} | {r['max_ms']:.1f} | "
            f"{cpu['upstream']:.2f} / {relay_cpu} / {cpu['wrk']:.2f} | {r['cores_busy']:.2f} | "
            f"{r['load'][0]:.1f} → {r['load'][1]:.1f} |"
        )
    lines += ["", *summary(runs), "", *answers_checked(runs, options.samples)]
    lines += ["", "## Where the time goes: the server's steps in one process", ""]
    lines += [
        f"{STEPS_COUNT} reports (and their capsules) through each step, one after the other, in the bench's "
        "process against the same stores, after the runs (no other load of the bench's): CPU and wall-clock "
        "ms per report, after 10 untimed. The first two rows are the whole WSGI application as gunicorn "
        "calls it (without gunicorn's HTTP parsing); the rows under `gateway_answer` are its parts (the "
        "key read among them is done at most once a second, not per capsule), the fast path's row the "
        "difference of the two above. The last row is the relay's application without its "
        "gunicorn: the rest of its CPU in the table above is gunicorn's.",
        "",
        "| step | CPU ms/report | wall ms/report |",
        "|---|---:|---:|",
    ]
    whole, bare = steps[STEP_GATEWAY], steps[STEP_GATEWAY_ANSWER]
    around = (whole[0] - bare[0], whole[1] - bare[1])
    relay = steps.pop(STEP_RELAY)
    steps["… the fast path around `gateway_answer` (the difference: type and size checks, the response)"] = around
    steps[STEP_RELAY] = relay
    lines += [f"| {name} | {cpu:.3f} | {wall:.3f} |" for name, (cpu, wall) in steps.items()]
    path.write_text("\n".join(lines) + "\n" + READING)
    print(f"wrote {path}")


def summary(runs: list[dict]) -> list[str]:
    """One line per connection count: relay and gateway against direct, and the relay against the target."""
    lines = []
    for count in sorted({r["connections"] for r in runs}):
        at = [r for r in runs if r["connections"] == count]
        direct = next(r for r in at if r["path"] == "direct")
        gateway = next(r for r in at if r["path"] == "gateway")
        relays = "; ".join(
            f"{r['path']} ({r['relay']}) {r['rate']:,.0f}/s, p99 {r['p99_ms']:.0f} ms "
            f"({r['rate'] / direct['rate']:.2f} × direct, {r['rate'] / gateway['rate']:.2f} × gateway, "
            f"{r['rate'] / TARGET_RATE:.2f} × {TARGET_RATE:,}/s)"
            for r in at
            if r["relay"]
        )
        keyed = next(r for r in at if r["path"] == KEYED)
        lines.append(
            f"- {count} connections: direct {direct['rate']:,.0f}/s, p99 {direct['p99_ms']:.0f} ms; gateway "
            f"{gateway['rate']:,.0f}/s, p99 {gateway['p99_ms']:.0f} ms ({gateway['rate'] / direct['rate']:.2f} × "
            f"direct); with the key in PFS_LEADER_KEY {keyed['rate']:,.0f}/s, p99 {keyed['p99_ms']:.0f} ms "
            f"({keyed['rate'] / direct['rate']:.2f} × direct); {relays}."
        )
    return lines


def answers_checked(runs: list[dict], samples: int) -> list[str]:
    """Whether every answer was the one expected (202 direct, 200 a capsule; opened: 202 inside)."""
    wrong = []
    for r in runs:
        expected = "202" if r["path"] == "direct" else "200"
        opened = {"202": samples} if r["path"] in ("gateway", KEYED, "relay") else {}  # the stub's: none
        if set(r["statuses"]) != {expected} or r["socket_errors"] or r["opened"] != opened:
            wrong.append(f"{r['path']} ({r['relay'] or 'no relay'}) at {r['connections']} connections")
    if wrong:
        return [f"**Not every answer was the expected one** in: {'; '.join(wrong)}."]
    return [
        "Every answer was the expected one: 202 direct, 200 a capsule, no socket error; every opened "
        "answer's inner status 202."
    ]


READING = """
## Reading

The table is one run, on 2026-11-26, after two changes the first runs of this bench called for (the
commit "Gateway: the leader's keys read once a second ..."): before them, in three runs on the same
machine while other test suites shared it, each capsule cost the leader 6.1–6.8 ms of CPU against
1.95–2.08 ms for a direct upload, and the gateway answered 0.38–0.40 × the direct rate. In process,
2.0–2.5 ms of that was `gateway.gateway_keys()` reading the leader's key rows (two SELECTs) for
every capsule, and 0.6–1.3 ms Django's middleware in front of the view. Now the gateway reads the
keys at most once a second (at once for a capsule they do not open: a rotation), and pfs_web.wsgi
serves `POST /api/ohttp/` on the fast path, as it does the direct upload.

- **This run had the machine to itself** (load 0.9 at its start; the bench's own processes raised
  it). Both cores were busy in every row but the relay-alone ones: wrk, the leader, the relay,
  PostgreSQL and Redis share them, so the rates are those of 2 cores shared by all of it, not of the
  leader alone (results/upload.md measured 2,015–2,170 direct uploads/s with more threads in wrk).
- **The gateway now costs the leader 2.6–2.9 ms of CPU a capsule against 1.9–2.0 ms a direct upload**,
  and answers 0.72–0.81 × the direct rate (540/s against 676/s at 32 connections). In process: the
  HPKE open 0.32 ms, Binary HTTP and the sealed answer 0.09 ms, the upload itself 0.79 ms, as direct.
  Keeping the key in `PFS_LEADER_KEY` instead of the database no longer changes anything (545/s).
- **Through the relay, 351–375 uploads/s here: 0.65–0.76 × the gateway's own rate**, because the
  relay (1.1–1.3 ms of CPU a capsule) runs on the same 2 cores as the leader: leader and relay
  together cost about 4.1 ms a relayed upload. On its own host the relay takes nothing from the
  leader's cores.
- **The relay alone** (relay → stub, a gateway that costs nothing): one worker forwarded 894–912
  capsules/s at 1.2 ms each, one core at most (the GIL); **two workers forwarded 1,927–1,999/s**,
  p99 35–61 ms, at 0.86 ms each: the relay keeps up with 1,500 reports/s with 2 workers (its default;
  `make run` starts 1, for development) and about 1.3–1.5 cores of its own. Of its 0.86 ms, its own
  application is 0.27 ms; the rest is gunicorn's gthread worker. The earlier runs under load agree
  (1,839–2,096/s with 2 workers, 1,054–1,195/s with 1).
- **Against the 1,500 reports/s both aggregators are to verify** (issue 28; results/upload_prio3.md):
  at 2.6–2.9 ms a capsule the gateway needs about 4 cores of the leader's for 1,500 relayed uploads/s,
  against about 3 for direct ones; the relay about 1.5 cores on its host. Verification, not the way
  in, stays the limit (results/upload_prio3.md: 504–1,408 reports/s verified).
"""


if __name__ == "__main__":
    main()
