"""Training under a multi-process launcher: `torchrun` (one node or many) and SLURM's `srun`.

Each launched process runs `retrieval-gate train` whole; Lightning finds the launcher from
the environment (TorchElasticEnvironment, SLURMEnvironment) and joins the processes in one
DDP group. It still takes the device count per node and the node count from the Trainer, and
with `trainer.devices: auto` on CPU it would pick one device: every rank would then train
alone and write the same run folder. `launcher_trainer` fills what the config leaves at auto
from the launcher (processes per node, nodes, DDP), and refuses values that contradict it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError


def launched_world(env: Mapping[str, str] = os.environ) -> tuple[str, int, int] | None:
    """(launcher, processes per node, nodes) when this process was started by torchrun or by
    srun inside a SLURM job; None for a plain process."""
    if "TORCHELASTIC_RUN_ID" in env and "LOCAL_WORLD_SIZE" in env:
        per_node, world = int(env["LOCAL_WORLD_SIZE"]), int(env["WORLD_SIZE"])
        return "torchrun", per_node, max(1, world // per_node)
    # Lightning's rule: an srun step (SLURM_NTASKS set) unless the job is an interactive shell
    if "SLURM_NTASKS" in env and env.get("SLURM_JOB_NAME") not in ("bash", "interactive"):
        nodes = int(env.get("SLURM_NNODES") or env.get("SLURM_JOB_NUM_NODES") or 1)
        return "slurm", max(1, int(env["SLURM_NTASKS"]) // nodes), nodes
    return None


# Set by Lightning in the processes it starts itself (its DDP launcher's other ranks) and by
# hand on the nodes of a run started without a launcher.
LIGHTNING_RANK_ENV = ("LOCAL_RANK", "NODE_RANK")


def rank_zero(env: Mapping[str, str] = os.environ) -> bool:
    """Whether this process is global rank zero of its run (a plain process is): srun's
    SLURM_PROCID, torchrun's RANK, else Lightning's own processes (LOCAL_RANK on NODE_RANK,
    which its launcher sets in the processes it starts, or GROUP_RANK, as Lightning reads it).
    Read from the environment: the run folder is claimed before any process group exists."""
    world = launched_world(env)
    if world is not None and world[0] == "slurm":
        return int(env.get("SLURM_PROCID") or 0) == 0
    if env.get("RANK"):  # torchrun's global rank (a node's first process may be another's)
        return int(env["RANK"]) == 0
    node = env.get("NODE_RANK") or env.get("GROUP_RANK")
    return int(node or 0) == 0 and int(env.get("LOCAL_RANK") or 0) == 0


def launcher_trainer(
    trainer: dict[str, Any], env: Mapping[str, str] = os.environ, cuda_devices: int | None = None
) -> dict[str, Any]:
    """`trainer` with devices, num_nodes and strategy set from the launcher where they are
    left at auto (unchanged when no launcher started this process). `cuda_devices`: this
    node's GPUs (default: what torch sees)."""
    world = launched_world(env)
    if world is None:
        return trainer
    launcher, per_node, nodes = world
    out = dict(trainer)
    if out.get("devices", "auto") == "auto":
        out["devices"] = per_node
    out.setdefault("num_nodes", nodes)
    if out.get("strategy", "auto") == "auto":
        out["strategy"] = "ddp"
    if (out["devices"], out["num_nodes"]) != (per_node, nodes):
        raise ConfigError(
            f"{launcher} started {per_node} process(es) per node on {nodes} node(s), but the "
            f"config asks trainer.devices={out['devices']} trainer.num_nodes={out['num_nodes']}: "
            "leave them at auto under a launcher, or make them match its "
            "--nproc-per-node/--nnodes (SLURM: --ntasks-per-node/--nodes)"
        )
    check_gpus_per_node(out, launcher, per_node, cuda_devices)
    return out


def check_gpus_per_node(
    trainer: dict[str, Any], launcher: str, per_node: int, cuda_devices: int | None
) -> None:
    """On a GPU node rank i takes the i-th GPU it sees: ranks past the last one would fail
    inside Lightning ("Invalid device id", seen with torchrun --nproc-per-node 2 on one H100;
    also what SLURM's --gpus-per-task gives, one visible GPU per task)."""
    if str(trainer.get("accelerator", "auto")).lower() not in ("auto", "gpu", "cuda"):
        return
    if cuda_devices is None:
        import torch

        cuda_devices = torch.cuda.device_count()
    if 0 < cuda_devices < per_node:
        raise ConfigError(
            f"{launcher} started {per_node} processes on this node, but each sees "
            f"{cuda_devices} GPU(s), and every process needs one of its own: start at most "
            f"{cuda_devices} per node (torchrun --nproc-per-node, SLURM --ntasks-per-node), let "
            "every process see all of the node's GPUs (SLURM: --gpus-per-node, not "
            "--gpus-per-task), or train the ranks on CPU with --set trainer.accelerator=cpu"
        )
