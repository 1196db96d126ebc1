#!/usr/bin/env bash
# Checks the main job's GPU paths (see scripts/check_gpu.py) with the project's venv and prints
# a table. Exits non-zero unless every path ran and passed: on a CPU-only machine the table
# lists what could not be checked. Run `RG_GPU=1 scripts/setup.sh` first on a GPU machine.
# It includes the Ray path of labelling with vLLM engines as Ray actors (`label --engine ray
# --ray-backend vllm`, ray.data.llm): that path needs a GPU and cannot run on the CPU machines
# (there the command stops before work: "this Ray cluster has none [GPUs]"); on a GPU machine
# the row runs 8 PopQA questions through one engine actor of a local Ray. To check it on a
# multi-GPU Ray cluster by hand: `ray start --head` on the GPU node, then
#   retrieval-gate label --policy closed-book --dataset popqa --limit 200 --engine ray \
#     --ray-backend vllm --actors <GPUs> --ray-address auto --out /tmp/ray-vllm.jsonl
# and compare its labels with `--engine local` on the same questions (docs/scale.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
exec "$PY" scripts/check_gpu.py "$@"
