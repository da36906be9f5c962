#!/usr/bin/env bash
# Finds or starts what the whole test suite needs, says what it uses, then runs the given command.
#
#   Redis     REDIS_URL if set; else a Redis on 127.0.0.1:6379 (database 15); else a private
#             redis-server started here on port 6399 and stopped afterwards.
#   Chromium  PFS_CHROMIUM if set, else /usr/bin/chromium (Debian's package).
#   wrk       on the PATH (Debian's package): the load smoke test drives gunicorn with it.
#   nginx     /usr/sbin/nginx or on the PATH (Debian's nginx-light): the smoke test's paced clients
#             reach gunicorn through it, as the bench measures the read target.
#   Database  DATABASE_URL if set; else PostgreSQL on 127.0.0.1:5432 if it answers; else SQLite.
#
# In CI (CI=true), or with PFS_INSTALL_SERVICES=1, as root it installs a missing redis-server,
# chromium, wrk or nginx with apt-get. Whatever is still missing is named, and the run fails: integration and
# browser tests are never skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
missing=()
private_redis_pid=""

say() { echo "make test: $*" >&2; }
can_install() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && { [ "${CI:-}" = true ] || [ "${PFS_INSTALL_SERVICES:-}" = 1 ]; }
}
apt_updated=""
apt_install() {
  say "installing $* with apt-get"
  if [ -z "$apt_updated" ]; then apt-get update -qq >/dev/null && apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
redis_answers() {
  "$PY" -c 'import sys, redis; redis.Redis.from_url(sys.argv[1], socket_connect_timeout=1).ping()' "$1" 2>/dev/null
}
cleanup() {
  if [ -n "$private_redis_pid" ]; then kill "$private_redis_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT

# ---- Redis
if [ -n "${REDIS_URL:-}" ]; then
  redis_answers "$REDIS_URL" || missing+=("Redis: REDIS_URL=$REDIS_URL does not answer")
elif redis_answers redis://127.0.0.1:6379/15; then
  export REDIS_URL=redis://127.0.0.1:6379/15
else
  if ! command -v redis-server >/dev/null && can_install; then apt_install redis-server; fi
  if command -v redis-server >/dev/null; then
    mkdir -p var
    redis-server --port 6399 --bind 127.0.0.1 --save "" --appendonly no --dir var --logfile var/test-redis.log &
    private_redis_pid=$!
    export REDIS_URL=redis://127.0.0.1:6399/0
    for _ in $(seq 50); do redis_answers "$REDIS_URL" && break; sleep 0.1; done
    redis_answers "$REDIS_URL" || missing+=("Redis: redis-server did not start (see var/test-redis.log)")
  else
    missing+=("Redis: install redis-server (apt-get install redis-server) or export REDIS_URL")
  fi
fi

# ---- Chromium (Playwright drives Debian's build; it cannot download its own here)
export PFS_CHROMIUM="${PFS_CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$PFS_CHROMIUM" ] && can_install; then apt_install chromium; fi
[ -x "$PFS_CHROMIUM" ] || missing+=("Chromium: install it (apt-get install chromium) or export PFS_CHROMIUM")

# ---- wrk (tests/integration/test_api_load_smoke.py, as bench/api_load.py)
if ! command -v wrk >/dev/null && can_install; then apt_install wrk; fi
command -v wrk >/dev/null || missing+=("wrk: install it (apt-get install wrk)")
# ---- nginx (the same test: clients at the dashboard's pace go through it)
nginx_found() { command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; }
if ! nginx_found && can_install; then apt_install nginx-light; fi
nginx_found || missing+=("nginx: install it (apt-get install nginx-light)")

# ---- Database
if [ -z "${DATABASE_URL:-}" ] && command -v psql >/dev/null \
   && psql -h 127.0.0.1 -U postgres -tAc 'select 1' postgres >/dev/null 2>&1; then
  export DATABASE_URL=postgres://postgres@127.0.0.1:5432/pfs_studio
fi

if [ ${#missing[@]} -gt 0 ]; then
  for item in "${missing[@]}"; do say "MISSING $item"; done
  say "the integration and browser tests need these; not running a partial suite"
  exit 1
fi
say "Redis ${REDIS_URL} · database ${DATABASE_URL:-SQLite (var/test.sqlite3)} · Chromium ${PFS_CHROMIUM}"
"$@"
