# PFS Studio. The two commands of the README: `make run` (dashboard + demo) and `make test` (all tests).
# Settings come from the environment, then from .env (written by `make setup`): the same in a plain
# shell as under make, except `make serve`, which turns DEBUG off.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
HOST ?= 127.0.0.1
PORT ?= 8000
# The helper aggregator's own service (pfs_web.settings_helper): beside the dashboard in `make run`,
# alone in `make helper`. The dashboard and the devices reach it at HELPER_URL (its default is this).
HELPER_HOST ?= 127.0.0.1
HELPER_PORT ?= 8001
# The Oblivious HTTP relay (pfs_relay): beside the dashboard in `make run`, alone in `make relay` (a
# third operator's host). It forwards the devices' sealed uploads to RELAY_LEADER's gateway;
# device_register names it (RELAY_URL) in the credentials it writes.
RELAY_HOST ?= 127.0.0.1
RELAY_PORT ?= 8002
RELAY_LEADER ?= http://$(HOST):$(PORT)
HELPER := DJANGO_SETTINGS_MODULE=pfs_web.settings_helper PROMETHEUS_MULTIPROC_DIR=$(CURDIR)/var/prometheus-helper
# Installs only what the lock files pin, each file checked against its hash.
PIP_INSTALL := $(PY) -m pip install --quiet --require-hashes
# `make lock`: pins with hashes; no index or find-links of this machine written into the files.
PIP_COMPILE := $(VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
	--no-emit-index-url --no-emit-find-links $(LOCK_ARGS)

# Pins of the vendored front-end files (see their rules below).
PLOTLY_JS_VERSION := 4.1.1
PLOTLY_CARTESIAN_SHA256 := c5f9a84666b97e571a04de689e09319869e60900e265c89eac2f71d0b5a0de88
AXE_CORE_VERSION := 4.11.0
AXE_CORE_SHA256 := 39bed7d72308f6d620789c169d699bfd7e8da80f65b545821a6b2215c3e83107
VENDOR := static/vendor/plotly.min.js static/vendor/plotly-full.min.js static/vendor/redoc.standalone.js
# Stamp of the aggregators' compiled FLP query (its rule below).
COMPILED := var/flp_query_jit.compiled

.PHONY: run setup install serve helper relay worker beat test lint lock bench bench-load clean

# The processes of this checkout (web, worker, beat) write their metrics into one folder, so that
# /metrics counts what each of them did (Prometheus multiprocess mode, docs/deployment.md).
run serve worker beat: export PROMETHEUS_MULTIPROC_DIR ?= $(CURDIR)/var/prometheus
# Where the leader's processes reach the helper's service (the one `make run` starts, or `make helper`'s).
run serve worker beat: export HELPER_URL ?= http://$(HELPER_HOST):$(HELPER_PORT)

run: setup ## serve the dashboard with the demo at http://$(HOST):$(PORT), the helper aggregator's service at http://$(HELPER_HOST):$(HELPER_PORT) and the relay at http://$(RELAY_HOST):$(RELAY_PORT)
	mkdir -p var/prometheus-helper
	$(HELPER) $(PY) manage.py runserver $(HELPER_HOST):$(HELPER_PORT) --noreload & helper=$$!; \
	  $(PY) -m pfs_relay --leader http://$(HOST):$(PORT) --bind $(RELAY_HOST):$(RELAY_PORT) --workers 1 & relay=$$!; \
	  trap 'kill $$helper $$relay 2>/dev/null' EXIT; \
	  $(PY) manage.py runserver $(HOST):$(PORT) --noreload

setup: $(VENV)/.runtime $(VENDOR) .env $(COMPILED) ## install, migrate and seed the demo (no serving)
	mkdir -p var var/prometheus var/prometheus-helper
	$(PY) manage.py database_create
	$(PY) manage.py migrate --noinput
	$(PY) manage.py migrate --database issuer --noinput
	$(HELPER) $(PY) manage.py database_create
	$(HELPER) $(PY) manage.py migrate --database helper --noinput
	$(PY) manage.py seed_demo

install: $(VENV)/.runtime $(VENDOR) $(COMPILED) ## production hosts: the virtualenv from the lock and the vendored front-end files, nothing else (docs/deployment.md)

serve: $(VENV)/.runtime $(VENDOR) .env $(COMPILED) ## the production profile: gunicorn with DEBUG off, static files collected (docs/deployment.md)
	mkdir -p var var/prometheus
	DEBUG=0 $(PY) manage.py migrate --noinput
	DEBUG=0 $(PY) manage.py migrate --database issuer --noinput
	DEBUG=0 $(PY) manage.py collectstatic --noinput --verbosity 0
	DEBUG=0 $(PY) manage.py check --deploy
	DEBUG=0 PFS_BIND=$(HOST):$(PORT) exec $(VENV)/bin/gunicorn -c gunicorn.conf.py

helper: $(VENV)/.runtime .env $(COMPILED) ## the helper aggregator's own service alone, for a host of its own (docs/deployment.md): its store migrated, gunicorn at http://$(HELPER_HOST):$(HELPER_PORT)
	mkdir -p var var/prometheus-helper
	$(HELPER) $(PY) manage.py database_create
	$(HELPER) $(PY) manage.py migrate --database helper --noinput
	$(HELPER) PFS_BIND=$(HELPER_HOST):$(HELPER_PORT) exec $(VENV)/bin/gunicorn -c gunicorn.conf.py --name pfs-helper

relay: $(VENV)/.runtime ## the Oblivious HTTP relay alone, for a third operator's host (docs/deployment.md): no database, no key, at http://$(RELAY_HOST):$(RELAY_PORT), forwarding to RELAY_LEADER's gateway
	exec $(PY) -m pfs_relay --leader $(RELAY_LEADER) --bind $(RELAY_HOST):$(RELAY_PORT)

worker: $(VENV)/.runtime .env $(COMPILED) ## a Celery worker consuming from Redis (needs REDIS_URL)
	mkdir -p var var/prometheus
	exec $(VENV)/bin/celery -A pfs_web worker --loglevel=INFO

beat: $(VENV)/.runtime .env ## Celery beat, its own process: schedules the stuck-round reaper (needs REDIS_URL)
	mkdir -p var var/prometheus
	exec $(VENV)/bin/celery -A pfs_web beat --loglevel=INFO

test: $(VENV)/.dev $(VENDOR) var/vendor/axe.min.js $(COMPILED) ## the whole suite: unit, stats, integration (Redis + worker), browser
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

bench: $(VENV)/.dev $(VENDOR) $(COMPILED)
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

# The aggregators' compiled FLP query (aggregation.flp_query_jit), compiled here once (about 15 s)
# and kept in aggregation/__pycache__, so that no worker compiles it at its first job. Again
# whenever its source changes (numba would then compile it afresh anyway).
$(COMPILED): aggregation/flp_query_jit.py $(VENV)/.runtime
	mkdir -p var
	$(PY) -c 'from aggregation.flp_query_jit import warm; warm()'
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

# Front-end files are vendored here, at setup, each pinned by version and sha256: the app serves
# them itself (WhiteNoise: compressed, cached for good under hashed names) and nothing is fetched
# at run time, from no CDN. The npm tarballs are fetched once, checked, and kept in var/npm.
# - plotly.min.js: plotly.js's cartesian partial bundle (bar, heatmap, scatter), every chart but
#   the discovery tree: 1.5 MB (0.5 MB gzipped) instead of the full 4.8 MB (1.5 MB).
# - plotly-full.min.js: the full bundle of the pinned plotly pip package (same plotly.js version),
#   for the sunburst of an n-gram discovery's run page only.
# - redoc.standalone.js: drf-spectacular-sidecar's ReDoc without the Redocly logo it loads from a
#   CDN (a data: URI instead); the check fails if the pinned bundle no longer has that address. Its
#   source-map comment goes too: the map is not shipped, and collectstatic refuses a missing reference.
# - var/vendor/axe.min.js: axe-core, for the browser tests' accessibility checks; not served.

# $(1) package, $(2) version, $(3) sha256 of its tarball: the registry's tarball, with curl (no npm
# needed), kept only if its hash is the pinned one. NPM_REGISTRY may name a mirror.
NPM_REGISTRY ?= https://registry.npmjs.org
define npm_fetch
	mkdir -p var/npm
	curl -fsSL --retry 2 -o "$@.part" "$(NPM_REGISTRY)/$(1)/-/$(1)-$(2).tgz"
	echo "$(3)  $@.part" | sha256sum --check --quiet || { rm -f "$@.part"; echo "$(1) $(2): not the pinned tarball"; exit 1; }
	mv "$@.part" "$@"
endef

var/npm/plotly.js-cartesian-dist-min-$(PLOTLY_JS_VERSION).tgz:
	$(call npm_fetch,plotly.js-cartesian-dist-min,$(PLOTLY_JS_VERSION),$(PLOTLY_CARTESIAN_SHA256))

var/npm/axe-core-$(AXE_CORE_VERSION).tgz:
	$(call npm_fetch,axe-core,$(AXE_CORE_VERSION),$(AXE_CORE_SHA256))

static/vendor/plotly.min.js: var/npm/plotly.js-cartesian-dist-min-$(PLOTLY_JS_VERSION).tgz
	mkdir -p static/vendor
	tar -xzOf $< package/plotly-cartesian.min.js > $@.part && mv $@.part $@

static/vendor/plotly-full.min.js: $(VENV)/.runtime
	mkdir -p static/vendor
	cp "$$($(PY) -c 'import plotly, pathlib; print(pathlib.Path(plotly.__file__).parent / "package_data" / "plotly.min.js")')" $@
	head -c 200 $@ | grep -q "plotly.js v$(PLOTLY_JS_VERSION)" || { echo "plotly pip package is not plotly.js $(PLOTLY_JS_VERSION)"; rm $@; exit 1; }

static/vendor/redoc.standalone.js: $(VENV)/.runtime
	mkdir -p static/vendor
	src="$$($(PY) -c 'import drf_spectacular_sidecar, pathlib; print(pathlib.Path(drf_spectacular_sidecar.__file__).parent / "static/drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js")')"; \
	  grep -q 'https://cdn.redoc.ly/redoc/logo-mini.svg' "$$src" || { echo "the ReDoc bundle changed: check its external addresses"; exit 1; }; \
	  sed -e 's|https://cdn.redoc.ly/redoc/logo-mini.svg|data:image/gif;base64,R0lGODlhAQABAAAAACH5BAEKAAEALAAAAAABAAEAAAICTAEAOw==|' \
	    -e '/^\/\/# sourceMappingURL=redoc\.standalone\.js\.map$$/d' "$$src" > $@.part
	! grep -Eo 'src:"https?://[^"]*"' $@.part
	mv $@.part $@

var/vendor/axe.min.js: var/npm/axe-core-$(AXE_CORE_VERSION).tgz
	mkdir -p var/vendor
	tar -xzOf $< package/axe.min.js > $@.part && mv $@.part $@

clean:
	rm -rf $(VENV) var static/vendor
