"""Benchmark: a round page with its chart, in Chromium, served by this machine.

A released round of 8 buckets (the test fleet of 5,000 devices, temporary SQLite, tasks inline),
served by `manage.py runserver` on 127.0.0.1 (DEBUG on, static files uncompressed). For each
plotly.js bundle, the page is opened cold (a new browser context: nothing cached) REPEAT times:

- localhost: DOMContentLoaded, load, and the chart drawn (plotly's .js-plotly-plot in #chart);
- a 1.6 Mbit/s link (40 ms latency, Chromium's network emulation): the same, and when the chart
  box first shows its loading state (first contentful paint).

The bundles: the cartesian partial bundle the pages load (static/vendor/plotly.min.js, Makefile)
and the full one (static/vendor/plotly-full.min.js, asked for in its place by request interception).
Production (`make serve`) sends them compressed (WhiteNoise, gzip/brotli): their gzipped sizes are
in the table too. Needs `make static/vendor/plotly.min.js` and the full bundle in static/vendor.

    .venv/bin/python bench/chart_page.py            # writes bench/results/chart_page.md
"""

from __future__ import annotations

import argparse
import gzip
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.host import describe, process_group_stop  # noqa: E402

VENDOR = ROOT / "static" / "vendor"
BUNDLES = {"cartesian (served)": VENDOR / "plotly.min.js", "full": VENDOR / "plotly-full.min.js"}
SLOW = {"offline": False, "latency": 40, "downloadThroughput": 1.6e6 / 8, "uploadThroughput": 1.6e6 / 8}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seed(env: dict[str, str]) -> int:
    """Migrate, then one released round of alice's test.ages; its id."""
    os.environ.update(env)
    import copy

    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from analyses.rules.roles import make_privacy_officer
    from analyses.services.policy import analysis_approve, analysis_create
    from analyses.services.rounds import round_create_and_start
    from devices.fleet_io import fleet_create
    from tests.conftest import FLEET_SIZE, RECIPE, SHARD_SIZE, SPEC

    call_command("migrate", verbosity=0)
    call_command("migrate", database="helper", verbosity=0)  # the helper's own store (pfs_base.db_router)
    users = get_user_model().objects
    analyst = users.create_user("alice", password="alice-password")
    officer = users.create_user("olivia", password="olivia-password")
    make_privacy_officer(officer)
    fleet_create(name="small", size=FLEET_SIZE, seed=11, shard_size=SHARD_SIZE)
    analysis = analysis_approve(analysis=analysis_create(spec=copy.deepcopy(SPEC), owner=analyst), officer=officer)
    return round_create_and_start(analysis=analysis, content=copy.deepcopy(RECIPE), user=analyst).pk


def measure(browser, base: str, path: str, bundle: Path, *, slow: bool) -> dict[str, float]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{base}/login/")
        page.get_by_label("Username").fill("alice")
        page.get_by_label("Password").fill("alice-password")
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{base}/")
        if bundle != BUNDLES["cartesian (served)"]:
            # Fetched from the server under its own name (a fulfilled route would skip the throttled link).
            other = f"{base}/static/vendor/{bundle.name}"
            page.route("**/vendor/plotly.min.js", lambda route: route.continue_(url=other))
        cdp = context.new_cdp_session(page)
        cdp.send("Network.enable")
        cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
        if slow:
            cdp.send("Network.emulateNetworkConditions", SLOW)
        page.goto(f"{base}{path}", wait_until="commit")
        page.wait_for_selector("#chart.js-plotly-plot", timeout=120_000)
        return page.evaluate(
            """() => {
                const nav = performance.getEntriesByType('navigation')[0];
                const paint = performance.getEntriesByName('first-contentful-paint')[0];
                return {dcl: nav.domContentLoadedEventEnd, load: nav.loadEventEnd || performance.now(),
                        drawn: performance.now(), fcp: paint ? paint.startTime : null};
            }"""
        )
    finally:
        context.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "chart_page.md"))
    args = parser.parse_args()
    missing = [str(p) for p in BUNDLES.values() if not p.exists()]
    if missing:
        sys.exit(f"missing {missing}: run make static/vendor/plotly.min.js static/vendor/plotly-full.min.js")
    tmp = tempfile.mkdtemp()
    env = {
        "DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3",
        "SECRET_KEY": "bench",
        "DJANGO_SETTINGS_MODULE": "pfs_web.settings_test",
        "DEBUG": "1",
        "PFS_ENV_FILE": os.devnull,
    }
    round_id = seed(env)
    port = free_port()
    load_before = os.getloadavg()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    rows = []
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{base}/login/", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        from playwright.sync_api import sync_playwright

        from tests.conftest import CHROMIUM_ARGS

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=os.environ.get("PFS_CHROMIUM", "/usr/bin/chromium"), headless=True, args=CHROMIUM_ARGS
            )
            for name, bundle in BUNDLES.items():
                for slow in (False, True):
                    runs = [
                        measure(browser, base, f"/rounds/{round_id}/", bundle, slow=slow) for _ in range(args.repeat)
                    ]
                    median = {key: statistics.median(r[key] for r in runs if r[key] is not None) for key in runs[0]}
                    rows.append((name, bundle, slow, median))
            browser.close()
    finally:
        process_group_stop(server)
    load_after = os.getloadavg()
    lines = [
        "# Chart page: a round page with its chart, in Chromium",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC · {describe(tasks='tasks inline')} · Chromium "
        f"({os.environ.get('PFS_CHROMIUM', '/usr/bin/chromium')}) · load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after · `manage.py runserver` (DEBUG on, files uncompressed) · median of "
        f"{args.repeat} cold loads (nothing cached)",
        "",
        "| plotly.js bundle | size | gzipped | network | DOMContentLoaded | load | chart drawn | loading state shown |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for name, bundle, slow, median in rows:
        raw = bundle.read_bytes()
        lines.append(
            f"| {name} | {len(raw) / 1e6:.2f} MB | {len(gzip.compress(raw, 6)) / 1e6:.2f} MB | "
            f"{'1.6 Mbit/s, 40 ms' if slow else 'localhost'} | {median['dcl']:,.0f} ms | {median['load']:,.0f} ms | "
            f"{median['drawn']:,.0f} ms | {median['fcp']:,.0f} ms |"
        )
    lines += [
        "",
        "Times are from the start of the navigation. *Loading state shown*: the first contentful paint,",
        "when the page (its chart box saying it is loading) is first drawn; its links, forms and table",
        "work from then on (the scripts come last in the page). On the slow link the files",
        "travel uncompressed here; `make serve` sends them gzipped or brotli-compressed (WhiteNoise), about a",
        "third of the size, and cached for good under hashed names.",
        "",
    ]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
