# PFS Studio. The two commands of the README: `make run` (dashboard + demo) and `make test` (all tests).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
HOST ?= 127.0.0.1
PORT ?= 8000
# Local development runs with DEBUG on (development secret key, static files served by runserver).
export DEBUG ?= 1

.PHONY: run setup worker test lint bench bench-load clean

run: setup ## serve the dashboard with the demo at http://$(HOST):$(PORT)
	$(PY) manage.py runserver $(HOST):$(PORT) --noreload

setup: $(VENV)/.runtime static/vendor/plotly.min.js ## install, migrate and seed the demo (no serving)
	mkdir -p var
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo

worker: $(VENV)/.runtime ## a Celery worker (needs REDIS_URL), with beat for the stuck-round reaper
	@test -n "$$REDIS_URL" || { echo "worker: set REDIS_URL, e.g. redis://127.0.0.1:6379/0" >&2; exit 2; }
	@mkdir -p var
	$(VENV)/bin/celery -A pfs_web worker --beat --schedule var/celerybeat-schedule --loglevel=INFO

test: $(VENV)/.dev static/vendor/plotly.min.js ## the whole suite: unit, stats, integration (Redis + worker), browser
	scripts/with-test-services.sh $(PY) -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

bench: $(VENV)/.dev static/vendor/plotly.min.js
	$(PY) bench/fleet_round.py
	$(PY) bench/ngram_discovery.py

bench-load: $(VENV)/.runtime ## the API and dashboard load test (PostgreSQL and Redis on 127.0.0.1, wrk, nginx: bench/README.md)
	$(PY) bench/api_load.py --duration 15

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.runtime: requirements.txt | $(VENV)/bin/python
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.dev: requirements.txt requirements-dev.txt $(VENV)/.runtime
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

# plotly.js is vendored from the pinned plotly package: no CDN, no network at run time.
static/vendor/plotly.min.js: $(VENV)/.runtime
	mkdir -p static/vendor
	cp "$$($(PY) -c 'import plotly, pathlib; print(pathlib.Path(plotly.__file__).parent / "package_data" / "plotly.min.js")')" $@

clean:
	rm -rf $(VENV) var static/vendor
