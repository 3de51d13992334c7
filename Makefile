# Every target bootstraps first, so a fresh clone needs nothing but `make demo` or `make test`.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c

PY := .venv/bin/python

# Server mode against the machine's services. The key is a throwaway for tests only.
TEST_ENV := DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \
	REDIS_URL=redis://127.0.0.1:6379/0 \
	PREFLIGHT_SECRET_KEY=test-only-not-a-secret

.PHONY: bootstrap services node demo test lint bench

bootstrap:
	@bash .ci/bootstrap

services:
	@bash .ci/services

# The gateway tests' npm packages (the TypeScript SDK client, the filesystem MCP server).
node:
	@bash .ci/node

# Embedded mode: SQLite under var/, lookups in-process. An exported DATABASE_URL would silently switch modes.
# Migrates, loads the demo catalog (demo MCP servers), drives the scripted agent through the MCP gateway,
# then serves the console (:8000) and the gateway (:8766) until Ctrl-C.
demo: bootstrap
	env -u DATABASE_URL -u REDIS_URL PREFLIGHT_DEMO=1 $(PY) manage.py demo

lint: bootstrap
	$(PY) -m ruff check .
	$(PY) -m mypy

test: bootstrap services node lint
	env $(TEST_ENV) $(PY) -m pytest -n 2 tests

bench: bootstrap
	@shopt -s nullglob; benches=(bench/*.py); \
	if [ $${#benches[@]} -eq 0 ]; then echo "bench: no bench/*.py yet"; exit 0; fi; \
	for bench in "$${benches[@]}"; do echo "== $$bench"; $(PY) "$$bench"; done
