# Two commands on a fresh machine:
#   make serve   set up .venv, train the demo bundle if none exists, serve it on 127.0.0.1:8000
#   make test    set up .venv with the dev tools and system packages, run lint, mypy and every test
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STORE  ?= models_store
NAME   ?= demo
HOST   ?= 127.0.0.1
PORT   ?= 8000
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: serve test demo lint typecheck bench sysdeps clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# setup.py generates the gRPC stubs from the .proto files at install: a change to either
# reinstalls.
PROTOS := $(wildcard app/oip_grpc/*.proto)

$(VENV)/.train: pyproject.toml setup.py $(PROTOS) | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[train]'
	touch $@

$(VENV)/.dev: pyproject.toml setup.py $(PROTOS) | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.train

$(STORE)/$(NAME)/LATEST: | $(VENV)/.train
	$(BIN)/iabma train --dataset simulation --store $(STORE) --name $(NAME)

demo: $(STORE)/$(NAME)/LATEST

serve: $(VENV)/.train $(STORE)/$(NAME)/LATEST
	$(BIN)/iabma serve --store $(STORE) --name $(NAME) --host $(HOST) --port $(PORT)

# nginx (the compose load balancer, run for real by the tests), docker-compose (offline
# `docker-compose config`), wrk and h2load (bounded load tests on 127.0.0.1; h2load, from
# nghttp2-client, loads the gRPC port), chromium and its driver (the audit console's
# browser tests).
sysdeps:
	@command -v nginx >/dev/null && command -v docker-compose >/dev/null && command -v wrk >/dev/null \
	  && command -v h2load >/dev/null && command -v chromium >/dev/null && command -v chromedriver >/dev/null \
	  || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq nginx docker-compose wrk \
	       nghttp2-client chromium chromium-driver >/dev/null; }

lint: $(VENV)/.dev
	$(BIN)/ruff check app training tests bench
	$(BIN)/ruff format --check app training tests bench
	$(BIN)/lint-imports

# mypy over app/ and training/ (the files and settings are in pyproject.toml).
typecheck: $(VENV)/.dev
	$(BIN)/mypy

test: $(VENV)/.dev sysdeps lint typecheck
	$(BIN)/python -m pytest

bench: $(VENV)/.dev
	$(BIN)/python bench/gate_fit.py

clean:
	rm -rf $(VENV) var .pytest_cache
