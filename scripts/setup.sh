#!/usr/bin/env bash
# Install thoughtloom with the embedded model into .venv, then run the main job:
#   bash scripts/setup.sh                       -> loom solve --task game24 "4 5 6 10"
#   bash scripts/setup.sh solve --task game24 "1 1 4 6" --json   (any loom arguments)
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh" local,plot
if [ "$#" -eq 0 ]; then
  set -- solve --task game24 "4 5 6 10"
fi
echo "==> loom $*" >&2
exec "$VENV/bin/loom" "$@"
