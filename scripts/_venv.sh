# Shared by setup.sh and test.sh: create .venv with Python >= 3.11 and install the project.
# Usage: source scripts/_venv.sh EXTRAS   (e.g. "local" or "local,dev")
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${THOUGHTLOOM_VENV:-$ROOT/.venv}"

PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
  for candidate in python3.13 python3.12 python3.11 python3 python; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      PYTHON="$candidate"
      break
    fi
  done
fi
if [ -z "$PYTHON" ]; then
  echo "thoughtloom needs Python 3.11 or newer; none found on PATH (set PYTHON=/path/to/python3.11)" >&2
  exit 2
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating virtual environment $VENV" >&2
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi

# llama.cpp is compiled at install. A default native build can crash in the AMX matmul kernel
# on some CPUs; a portable build with the common x86 extensions is safe and fast enough.
# pip caches the built wheel, so only the first install pays the few minutes of compiling.
if [ "$(uname -m)" = "x86_64" ]; then
  export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}"
else
  export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}"
fi

if ! "$VENV/bin/python" -c 'import llama_cpp' >/dev/null 2>&1; then
  echo "==> installing (the first time compiles llama.cpp: about 5 minutes on 2 cores)" >&2
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT[$1]"
