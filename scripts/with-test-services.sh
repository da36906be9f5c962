#!/usr/bin/env bash
# Finds or starts what the whole test suite needs, says what it uses, then runs the given command.
#
#   Redis       REDIS_URL if set; else a private redis-server started here on a free port of
#               127.0.0.1 and stopped afterwards (its own queues: the suites of other checkouts on
#               this machine never take this one's tasks); else a Redis on 127.0.0.1:6379 (db 15).
#   PostgreSQL  DATABASE_URL if set; else the server on 127.0.0.1:5432 if it answers (user
#               postgres), with a database named after this checkout, so that two checkouts' suites
#               never share one; else a private cluster started here on a free port (trust
#               authentication, loopback only), stopped and removed afterwards.
#               PFS_TEST_POSTGRES=private starts the private cluster even when 5432 answers.
#   Chromium    PFS_CHROMIUM if set, else /usr/bin/chromium (Debian's package).
#   wrk         on the PATH (Debian's package): the load smoke test drives gunicorn with it.
#   nginx       /usr/sbin/nginx or on the PATH (Debian's nginx-light): the smoke test's paced
#               clients reach gunicorn through it, and the production profile's test serves HTTPS
#               through deploy/nginx/pfs.conf.
#   systemd-analyze  on the PATH (Debian's systemd): checks the units in deploy/systemd.
#
# In CI (CI=true), or with PFS_INSTALL_SERVICES=1, as root it installs a missing redis-server,
# postgresql, chromium, wrk, nginx or systemd with apt-get. Whatever is still missing is named, and
# the run fails: integration and browser tests are never skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
missing=()
private_redis_pid=""
private_postgres_dir=""

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
free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
redis_answers() {
  "$PY" -c 'import sys, redis; redis.Redis.from_url(sys.argv[1], socket_connect_timeout=1).ping()' "$1" 2>/dev/null
}
postgres_answers() {
  "$PY" -c 'import sys, psycopg; psycopg.connect(sys.argv[1], connect_timeout=2).close()' "$1" 2>/dev/null
}
postgres_bin() {  # the newest PostgreSQL's bin/ folder (Debian keeps them apart), or the PATH's
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -n "$dir" ]; then echo "$dir"; elif command -v initdb >/dev/null; then dirname "$(command -v initdb)"; fi
}
as_postgres() {  # PostgreSQL refuses to run as root
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
cleanup() {
  if [ -n "$private_redis_pid" ]; then kill "$private_redis_pid" 2>/dev/null || true; fi
  if [ -n "$private_postgres_dir" ]; then
    as_postgres "$(postgres_bin)/pg_ctl" -D "$private_postgres_dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$private_postgres_dir"
  fi
}
trap cleanup EXIT

# ---- Redis
if [ -n "${REDIS_URL:-}" ]; then
  redis_answers "$REDIS_URL" || missing+=("Redis: REDIS_URL=$REDIS_URL does not answer")
else
  if ! command -v redis-server >/dev/null && can_install; then apt_install redis-server; fi
  if command -v redis-server >/dev/null; then
    mkdir -p var
    port=$(free_port)
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$PWD/var" --logfile "$PWD/var/test-redis.log" &
    private_redis_pid=$!
    export REDIS_URL=redis://127.0.0.1:$port/0
    for _ in $(seq 50); do redis_answers "$REDIS_URL" && break; sleep 0.1; done
    redis_answers "$REDIS_URL" || missing+=("Redis: redis-server did not start (see var/test-redis.log)")
  elif redis_answers redis://127.0.0.1:6379/15; then
    export REDIS_URL=redis://127.0.0.1:6379/15
  else
    missing+=("Redis: install redis-server (apt-get install redis-server) or export REDIS_URL")
  fi
fi

# ---- PostgreSQL (the production profile's test needs it; the whole suite then runs on it)
checkout_db="pfs_studio_$(pwd -P | cksum | cut -d ' ' -f 1)"
if [ -n "${DATABASE_URL:-}" ]; then
  :
elif [ "${PFS_TEST_POSTGRES:-}" != private ] && postgres_answers postgresql://postgres@127.0.0.1:5432/postgres; then
  export DATABASE_URL=postgres://postgres@127.0.0.1:5432/$checkout_db
else
  if [ -z "$(postgres_bin)" ] && can_install; then apt_install postgresql; fi
  if [ -n "$(postgres_bin)" ]; then
    private_postgres_dir=$(mktemp -d /tmp/pfs-test-postgres.XXXXXX)
    [ "$(id -u)" = 0 ] && chown postgres: "$private_postgres_dir"
    port=$(free_port)
    bin=$(postgres_bin)
    if as_postgres "$bin/initdb" -D "$private_postgres_dir/data" -U postgres --auth=trust -E UTF8 >"$private_postgres_dir/initdb.log" 2>&1 \
       && as_postgres "$bin/pg_ctl" -D "$private_postgres_dir/data" -l "$private_postgres_dir/server.log" -w -t 60 \
            -o "-c listen_addresses=127.0.0.1 -p $port -k $private_postgres_dir -c fsync=off" start >/dev/null; then
      export DATABASE_URL=postgres://postgres@127.0.0.1:$port/$checkout_db
    else
      missing+=("PostgreSQL: a private cluster did not start (see $private_postgres_dir/*.log)")
      private_postgres_dir=""
    fi
  else
    missing+=("PostgreSQL: install it (apt-get install postgresql), start it on 127.0.0.1:5432 or export DATABASE_URL")
  fi
fi

# ---- Chromium (Playwright drives Debian's build; it cannot download its own here)
export PFS_CHROMIUM="${PFS_CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$PFS_CHROMIUM" ] && can_install; then apt_install chromium; fi
[ -x "$PFS_CHROMIUM" ] || missing+=("Chromium: install it (apt-get install chromium) or export PFS_CHROMIUM")

# ---- wrk (tests/integration/test_api_load_smoke.py, as bench/api_load.py)
if ! command -v wrk >/dev/null && can_install; then apt_install wrk; fi
command -v wrk >/dev/null || missing+=("wrk: install it (apt-get install wrk)")
# ---- nginx (the same test, and the production profile's test)
nginx_found() { command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; }
if ! nginx_found && can_install; then apt_install nginx-light; fi
nginx_found || missing+=("nginx: install it (apt-get install nginx-light)")
# ---- systemd-analyze (tests/unit/test_deploy_files.py verifies deploy/systemd's units)
if ! command -v systemd-analyze >/dev/null && can_install; then apt_install systemd; fi
command -v systemd-analyze >/dev/null || missing+=("systemd-analyze: install it (apt-get install systemd)")

if [ ${#missing[@]} -gt 0 ]; then
  for item in "${missing[@]}"; do say "MISSING $item"; done
  say "the integration and browser tests need these; not running a partial suite"
  exit 1
fi
say "Redis ${REDIS_URL} · database ${DATABASE_URL} · Chromium ${PFS_CHROMIUM}"
"$@"
