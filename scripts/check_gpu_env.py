"""The end of a GPU install (`RG_GPU=1 scripts/setup.sh`): proves the three things a GPU
machine needs and exits non-zero if one is missing.

1. ONNX Runtime has the CUDA execution provider, and only onnxruntime-gpu is installed.
2. vLLM's platform is CUDA.
3. torch runs one bf16-autocast training step on the GPU."""

from __future__ import annotations

import sys


def onnxruntime_line() -> tuple[bool, str]:
    import onnxruntime as ort

    from retrieval_gate.gates.onnx import CUDA, installed_onnxruntime_wheels

    wheels = installed_onnxruntime_wheels()
    ok = CUDA in ort.get_available_providers() and wheels == ["onnxruntime-gpu"]
    return (
        ok,
        f"onnxruntime {ort.__version__} providers={ort.get_available_providers()} wheels={wheels}",
    )


def vllm_line() -> tuple[bool, str]:
    import torch

    if not torch.cuda.is_available():  # importing vLLM took 8 s to say "device=cpu"
        from retrieval_gate.generation.cache import engine_version

        return False, f"{engine_version('vllm')}: torch sees no CUDA device"
    import vllm
    from vllm.platforms import current_platform

    device = current_platform.device_type
    return device == "cuda", f"vllm {vllm.__version__} device={device}"


def bf16_step_line() -> tuple[bool, str]:
    import torch

    if not torch.cuda.is_available():
        return False, f"torch {torch.__version__}: torch.cuda.is_available() is False"
    model = torch.nn.Linear(64, 2).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(8, 64, device="cuda"), torch.randint(0, 2, (8,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    name = torch.cuda.get_device_name(0)
    return bool(
        torch.isfinite(loss)
    ), f"torch {torch.__version__} bf16 step on {name}: loss {loss.item():.4f}"


def main() -> int:
    failed = 0
    for check in (onnxruntime_line, vllm_line, bf16_step_line):
        try:
            ok, line = check()
        except Exception as e:  # noqa: BLE001  (report every check, not only the first failure)
            ok, line = False, f"{type(e).__name__}: {e}"
        failed += not ok
        print(f"[setup] {'ok  ' if ok else 'FAIL'} {check.__name__.removesuffix('_line')}: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
