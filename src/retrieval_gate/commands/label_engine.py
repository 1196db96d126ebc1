"""`label --engine ray` flags and the engine they build (labels/ray_engine.py), checked
before any question is read: flag values, the policy, the Ray address, the endpoints."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..errors import ConfigError

# Each HTTP actor asks Ray for 0.01 CPU (labels/ray_engine.py: it waits on the network), so a
# local Ray places at most this many per CPU; more would wait for resources for ever.
ACTORS_PER_CPU = 100
# each --engine ray flag, its attribute and its default (None: the flag is not given)
RAY_FLAGS = {"--ray-address": ("ray_address", None), "--ray-backend": ("ray_backend", "openai"),
             "--actors": ("actors", 4), "--in-flight": ("in_flight", 8),
             "--ray-batch-size": ("ray_batch_size", None)}  # fmt: skip


def add_engine_args(p: argparse.ArgumentParser) -> None:
    from ..labelling import POLICIES

    covered = " and ".join(n for n, s in POLICIES.items() if s.ray)  # the specs say which
    g = p.add_argument_group(f"--engine ray ({covered}; docs/scale.md)")
    g.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="local: this process drives the generator (default); ray: Ray Data spreads the "
        "requests over actors (several --generator-url replicas, or vLLM engines on GPUs)",
    )
    g.add_argument(
        "--ray-address",
        help="Ray cluster to join (host:6379, ray://host:10001, or auto for the one `ray "
        "start` runs here); default: start a local Ray for this run",
    )
    g.add_argument(
        "--ray-backend",
        choices=("openai", "vllm"),
        help="openai: actors send requests to --generator-url endpoints; vllm: vLLM engines "
        "as Ray actors on the cluster's GPUs (ray.data.llm), model from --generator (default "
        f"{_default('--ray-backend')})",
    )
    g.add_argument("--actors", type=int, help="Ray actors (vllm: engine replicas; default "
                   f"{_default('--actors')})")  # fmt: skip
    g.add_argument("--in-flight", type=int, help="requests in flight per actor (default "
                   f"{_default('--in-flight')})")  # fmt: skip
    g.add_argument("--ray-batch-size", type=int, help="rows per Ray batch (default 2 x in-flight)")


def _default(flag: str) -> object:
    return RAY_FLAGS[flag][1]


def check_ray_flags(args: argparse.Namespace) -> None:
    """The --engine ray flags refused without it (a local run would ignore them), their
    defaults filled in with it."""
    given = [flag for flag, (attr, _) in RAY_FLAGS.items() if getattr(args, attr) is not None]
    if given and args.engine != "ray":
        raise ConfigError(f"{given[0]} goes with --engine ray, and this run labels with "
                          "--engine local: drop it, or add --engine ray")  # fmt: skip
    for attr, default in RAY_FLAGS.values():
        if getattr(args, attr) is None:
            setattr(args, attr, default)


def ray_options(args: argparse.Namespace) -> Any:
    """The `--engine ray` flags as `RayOptions`, checked: what Ray covers, the values, and as
    the actors' bound what a local Ray can place here (before Ray starts or a server is asked)."""
    from ..labelling import POLICIES
    from ..labels.ray_engine import RayOptions

    spec = POLICIES.get(args.policy)
    if spec is None or not spec.ray:  # the spec says whether Ray covers the policy
        covered = ", ".join(n for n, s in POLICIES.items() if s.ray)
        raise ConfigError(
            f"--engine ray does not go with --policy {args.policy}: --engine ray runs the "
            f"one-request policies ({covered}); --policy {args.policy} runs with --engine local"
        )
    if args.relabel or args.report or args.throughput:
        raise ConfigError(
            "--engine ray labels: it does not apply to --relabel, --report or --throughput"
        )
    options = RayOptions(urls=list(args.generator_url or []), model=args.generator,
                         backend=args.ray_backend, address=args.ray_address, actors=args.actors,
                         in_flight=args.in_flight, batch_size=args.ray_batch_size)  # fmt: skip
    options.check()
    if args.ray_address in (None, "local"):  # a cluster's size is known only once joined
        _check_local_actors(args.actors, args.ray_backend)
    return options


def _check_local_actors(actors: int, backend: str) -> None:
    from .plan import check_at_most, gpu_count

    if backend == "vllm":  # an engine replica per GPU
        gpus = gpu_count()
        check_at_most("--actors", actors, gpus, f"a local Ray runs one vLLM engine per GPU and "
                      f"this machine has {gpus} (on CPUs, label through `vllm serve` replicas "
                      "with --generator-url)")  # fmt: skip
        return
    cpus = max(2, os.cpu_count() or 2)  # what labels/ray_engine.py gives a local Ray
    check_at_most("--actors", actors, cpus * ACTORS_PER_CPU, f"a local Ray here places "
                  f"{ACTORS_PER_CPU} HTTP actors per CPU on {cpus} CPUs (or join a cluster with "
                  "--ray-address)")  # fmt: skip


def ray_engine(args: argparse.Namespace, questions: Any) -> Any:
    """The RayEngine for `--engine ray` (its flags checked by `ray_options`)."""
    from ..labels.policies import check_answers
    from ..labels.ray_engine import RayEngine

    options = ray_options(args)
    if questions is not None:
        check_answers(questions, args.policy)  # before contacting anything
    return RayEngine(options)
