#!/usr/bin/env bash
# Checks the main job's GPU paths (see scripts/check_gpu.py) with the project's venv and prints
# a table. Exits non-zero unless every path ran and passed: on a CPU-only machine the table
# lists what could not be checked. Run `RG_GPU=1 scripts/setup.sh` first on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
exec "$PY" scripts/check_gpu.py "$@"
