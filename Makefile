# PFS Studio. The two commands of the README: `make run` (dashboard + demo) and `make test` (all tests).
# Settings come from the environment, then from .env (written by `make setup`): the same in a plain
# shell as under make, except `make serve`, which turns DEBUG off.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
HOST ?= 127.0.0.1
PORT ?= 8000
# Installs only what the lock files pin, each file checked against its hash.
PIP_INSTALL := $(PY) -m pip install --quiet --require-hashes
# `make lock`: pins with hashes; no index or find-links of this machine written into the files.
PIP_COMPILE := $(VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
	--no-emit-index-url --no-emit-find-links $(LOCK_ARGS)

.PHONY: run setup install serve worker beat test lint lock bench bench-load clean

# The processes of this checkout (web, worker, beat) write their metrics into one folder, so that
# /metrics counts what each of them did (Prometheus multiprocess mode, docs/deployment.md).
run serve worker beat: export PROMETHEUS_MULTIPROC_DIR ?= $(CURDIR)/var/prometheus

run: setup ## serve the dashboard with the demo at http://$(HOST):$(PORT)
	$(PY) manage.py runserver $(HOST):$(PORT) --noreload

setup: $(VENV)/.runtime static/vendor/plotly.min.js .env ## install, migrate and seed the demo (no serving)
	mkdir -p var var/prometheus
	$(PY) manage.py database_create
	$(PY) manage.py migrate --noinput
	$(PY) manage.py migrate --database issuer --noinput
	$(PY) manage.py seed_demo

install: $(VENV)/.runtime static/vendor/plotly.min.js ## production hosts: the virtualenv from the lock and the vendored plotly.js, nothing else (docs/deployment.md)

serve: $(VENV)/.runtime static/vendor/plotly.min.js .env ## the production profile: gunicorn with DEBUG off, static files collected (docs/deployment.md)
	mkdir -p var var/prometheus
	DEBUG=0 $(PY) manage.py migrate --noinput
	DEBUG=0 $(PY) manage.py migrate --database issuer --noinput
	DEBUG=0 $(PY) manage.py collectstatic --noinput --verbosity 0
	DEBUG=0 $(PY) manage.py check --deploy
	DEBUG=0 PFS_BIND=$(HOST):$(PORT) exec $(VENV)/bin/gunicorn -c gunicorn.conf.py

worker: $(VENV)/.runtime .env ## a Celery worker consuming from Redis (needs REDIS_URL)
	mkdir -p var var/prometheus
	exec $(VENV)/bin/celery -A pfs_web worker --loglevel=INFO

beat: $(VENV)/.runtime .env ## Celery beat, its own process: schedules the stuck-round reaper (needs REDIS_URL)
	mkdir -p var var/prometheus
	exec $(VENV)/bin/celery -A pfs_web beat --loglevel=INFO

test: $(VENV)/.dev static/vendor/plotly.min.js ## the whole suite: unit, stats, integration (Redis + worker), browser
	scripts/with-test-services.sh $(PY) -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

# After adding or changing a dependency in requirements.in or requirements-dev.in. Pins already in
# the lock files stay as they are; LOCK_ARGS="--upgrade-package NAME" moves one.
lock: $(VENV)/.dev ## pin requirements*.in, with every package they pull in and its hashes, into requirements*.txt
	$(PIP_COMPILE) --output-file requirements.txt requirements.in
	$(PIP_COMPILE) --output-file requirements-dev.txt requirements-dev.in

bench: $(VENV)/.dev static/vendor/plotly.min.js
	$(PY) bench/fleet_round.py
	$(PY) bench/ngram_discovery.py

bench-load: $(VENV)/.runtime ## the API and dashboard load test (PostgreSQL and Redis on 127.0.0.1, wrk, nginx: bench/README.md)
	$(PY) bench/api_load.py --duration 15

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.runtime: requirements.txt | $(VENV)/bin/python
	$(PIP_INSTALL) -r requirements.txt
	touch $@

# requirements-dev.txt holds the runtime packages too, at the same versions.
$(VENV)/.dev: requirements-dev.txt $(VENV)/.runtime
	$(PIP_INSTALL) -r requirements-dev.txt
	touch $@

# Local settings of a fresh checkout: DEBUG on and a SECRET_KEY of its own. Written once and never
# overwritten (delete it for a new key); .gitignore keeps it out of the repository.
.env:
	umask 077 && { echo '# Written by `make setup` for local use, never overwritten. Every setting: .env.example.'; \
	  echo 'DEBUG=1'; echo "SECRET_KEY=$$($(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(50))')"; } > $@

# plotly.js is vendored from the pinned plotly package: no CDN, no network at run time.
static/vendor/plotly.min.js: $(VENV)/.runtime
	mkdir -p static/vendor
	cp "$$($(PY) -c 'import plotly, pathlib; print(pathlib.Path(plotly.__file__).parent / "package_data" / "plotly.min.js")')" $@

clean:
	rm -rf $(VENV) var static/vendor
