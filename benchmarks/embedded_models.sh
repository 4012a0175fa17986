#!/usr/bin/env bash
# The embedded models compared under one protocol (BENCHMARKS.md §6): the same data sets, lanes,
# problems (--limit 10 --select spread), seeds, temperature and per-problem token budgets for each.
#
#   bash benchmarks/embedded_models.sh OUT MODEL [MODEL ...]
#   bash benchmarks/embedded_models.sh /tmp/models qwen2.5-coder-0.5b gemma-3-270m
#
# MODEL is a name `loom models` lists. Each (model, data set group) is one `loom bench` run in
# OUT/<group>-<model>; re-running the same command resumes where it stopped. Data: $THOUGHTLOOM_DATA,
# else shared/data beside or above the working directory. Then:
#   .venv/bin/python benchmarks/embedded_models_table.py OUT
# prints the tables. SETS=gsm8k,code (comma-separated) runs only those groups; PY names the
# interpreter (default .venv/bin/python of this checkout).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
cd "$ROOT"  # `python -m thoughtloom` runs this checkout's code
OUT="$1"; shift
SETS="${SETS:-gsm8k,code,game24,hotpotqa}"
COMMON=(--limit 10 --select spread --seed 0 --temperature 0.7 --quiet --no-plot)

run() {  # run GROUP MODEL ARGS...
  local group="$1" model="$2"; shift 2
  case ",$SETS," in *",$group,"*) ;; *) return 0 ;; esac
  echo "==> $group on $model (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  "$PY" -m thoughtloom bench --model "local:$model" --out "$OUT/$group-$model" "${COMMON[@]}" "$@" \
    > "$OUT/$group-$model.txt"
}

mkdir -p "$OUT"
for model in "$@"; do
  run gsm8k "$model" --tasks gsm8k --lanes io,cot,cot_sc,react,tot --budget-tokens 8000
  run code "$model" --tasks humaneval,mbpp --lanes io,best_of_n,tot --budget-tokens 8000
  run game24 "$model" --tasks game24 --lanes io,cot,tot --budget-tokens 20000
  run hotpotqa "$model" --tasks hotpotqa --lanes io,cot,cot_sc --budget-tokens 8000
done
