"""`retrieval-gate serve`: the gate alone (`--mode gate`) or in front of a RAG loop, over HTTP."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import socket
from dataclasses import fields, replace
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..gates.registry import gate_names, gate_spec, needing
from ..rag.cascade import CASCADE
from ..rag.limits import Limits
from .interrupts import not_waiting_on_threads
from .question_args import add_data_dir
from .rag import (
    add_gate_args,
    add_generator_args,
    generator_kwargs,
    given_flags,
    mode_options,
    multi_step_config,
)

if TYPE_CHECKING:
    from ..gates.base import Gate
    from ..rag.modes import ModeOptions
    from ..rag.multistep import MultiStepConfig

log = logging.getLogger(__name__)
API_KEY_ENV = "RETRIEVAL_GATE_API_KEY"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="HTTP: POST /score and /answer {'questions': [...]}, GET /health, /metrics, /docs",
    )
    p.add_argument(
        "--mode",
        choices=("answer", "gate"),
        default="answer",
        help="answer: /score and /answer (starts the generator); gate: /score only, no "
        "generator (default: answer)",
    )
    p.add_argument(
        "--gate",
        choices=gate_names(),
        help="gate in front (default: onnx; --router DIR serves a router instead)",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: localhost only)")
    p.add_argument("--port", type=int, default=8000, help="TCP port")
    p.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"require `Authorization: Bearer KEY` on /score and /answer (default: ${API_KEY_ENV})",
    )
    add_limit_args(p)
    add_data_dir(p)
    add_generator_args(p)
    add_gate_args(p)
    from .cache import add_no_cache

    add_no_cache(p)
    p.set_defaults(run=run)


def add_limit_args(p: argparse.ArgumentParser) -> None:
    d = Limits()
    g = p.add_argument_group("limits (a request over them gets a 4xx, never a stalled server)")
    g.add_argument("--max-questions", type=int, default=d.max_questions, help="per request")
    g.add_argument(
        "--max-question-chars", type=int, default=d.max_question_chars, help="per question"
    )
    g.add_argument(
        "--max-body-bytes",
        type=int,
        default=d.max_body_bytes,
        help="request body, refused with 413 before it is read",
    )
    g.add_argument("--max-batch", type=int, default=d.max_batch, help="questions per engine call")
    g.add_argument(
        "--max-backlog",
        type=int,
        default=d.max_backlog,
        help="questions waiting before new requests get 429 with Retry-After",
    )
    g.add_argument(
        "--request-timeout",
        type=float,
        default=d.request_timeout,
        help="seconds a request may wait for its answer, queue included (then 504)",
    )


def limits(args: argparse.Namespace) -> Limits:
    """The limits from the flags, checked (before any engine starts)."""
    out = Limits(**{f.name: getattr(args, f.name) for f in fields(Limits)})
    out.check()
    return out


def check_bind(host: str, port: int, api_key: str | None) -> None:
    if not 0 < port < 65536:
        raise ConfigError(f"--port must be 1-65535, got {port}")
    if api_key is not None and not api_key.strip():
        raise ConfigError(f"--api-key (or ${API_KEY_ENV}) is empty")
    if api_key is not None and not _sendable(api_key):
        # HTTP strips a header value's surrounding whitespace and clients encode non-ASCII
        # differently (curl UTF-8, Starlette reads latin-1): every request got 401
        raise ConfigError(f"--api-key (or ${API_KEY_ENV}) has whitespace around it or a "
                          "character that is not printable ASCII, which no client can send "
                          "in `Authorization: Bearer KEY` as it is: use printable ASCII "
                          "without leading or trailing whitespace")  # fmt: skip
    _check_listen(host, port)  # first: no warning about an address it cannot serve on
    if not api_key and not _loopback(host):
        log.warning(f"serving on {host} without --api-key: anyone who can reach it can use it")


def _sendable(key: str) -> bool:
    """The key reaches the server byte for byte in an HTTP header, from any client."""
    return key == key.strip() and key.isascii() and key.isprintable()


def _check_listen(host: str, port: int) -> None:
    """The address can be listened on (free, assignable, allowed), tried now: found only when
    the server binds, it came after the engine had loaded."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        hint = ""
        if "://" in host or "/" in host:  # a URL where a host goes
            hint = "; pass a host name or address alone, e.g. --host 127.0.0.1 --port 8000"
        elif host.startswith("["):  # an IPv6 address as URLs bracket it
            hint = f"; pass an IPv6 address without brackets: --host {host.strip('[]')}"
        raise ConfigError(f"--host {host}: not an address here ({e.strerror}){hint}") from None
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server's own socket
        try:
            s.bind(address)
        except OSError as e:
            raise ConfigError(f"--host {host} --port {port}: cannot listen there ({e.strerror}): "
                              "pass another --port (or --host)") from None  # fmt: skip


def _gate_mode(args: argparse.Namespace) -> str:
    """`cascade` with --answer-gate, `router` with --router, else the --gate (default onnx);
    a --gate and --router not both."""
    from ..rag.modes import ModeOptions

    if args.router is not None and args.gate is not None:
        raise ConfigError(f"pass --gate {args.gate} or --router {args.router}, not both")
    if args.router is None and args.budget is not None:
        raise ConfigError("--budget goes with --router (a binary gate's operating point is "
                          "its threshold)")  # fmt: skip
    if args.router is None and args.router_variant != ModeOptions.router_variant:
        raise ConfigError("--router-variant picks the ONNX file of --router DIR's export: "
                          "pass it with --router DIR, or --variant for --gate onnx")  # fmt: skip
    if args.gate is not None and not gate_spec(args.gate).serves:
        raise ConfigError(f"--gate {args.gate} {_not_served(args.gate)}: serve a trained gate "
                          "(--gate onnx --onnx DIR) or a router (--router DIR)")  # fmt: skip
    if getattr(args, "answer_gate", None) is not None:
        # the router with the two-stage gate reading its closed-book answers: the ones the
        # engine makes (--mode answer), or the ones /score requests send (--mode gate)
        return CASCADE
    return "router" if args.router is not None else args.gate or "onnx"


def _not_served(gate: str) -> str:
    """Why a registry gate cannot decide for the questions a server is sent."""
    if "feature" in gate_spec(gate).options:  # the popularity gates
        return ("thresholds each question's popularity signal (--feature, s_pop by default), "
                "which the questions a server is sent do not carry: every one would get the "
                "same score (a gate trained with the signal as a side feature, data.features, "
                "reads it from each request's \"features\")")  # fmt: skip
    return "looks its decisions up by question id, and the questions a server is sent have none"


def _no_engine_flags(args: argparse.Namespace) -> None:
    """`--mode gate` starts no generator nor retriever: their flags, given, would be unused."""
    given = given_flags(args, add_generator_args)
    if given:
        raise ConfigError(f"{given[0]} sets the generator or retriever, and --mode gate starts "
                          "neither (POST /score decides only): drop it, or serve --mode "
                          "answer")  # fmt: skip


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _gate_before_engine(
    mode: str, options: ModeOptions, multi_step: MultiStepConfig, checked: Limits
) -> tuple[str, ModeOptions]:
    """The gate of `mode` built now, before the engine, when it does not ask the generator,
    and the backlog checked against the strategies it routes to: a router's multi-step
    questions weigh their steps, and a --max-backlog too small for one full request of them
    was refused only once the engine had started (minutes on a CPU). Returns the mode and
    options that hand `open_rag` the loaded gate (the router mode takes a loaded router or
    gate; the cascade a loaded router and answer gate), so it is not loaded twice."""
    from ..rag.cascade import Cascade
    from ..rag.modes import ROUTER, build_mode_gates

    if needing("generator", [mode]):  # a binary gate: a question is one step (checked)
        return mode, options
    built = build_mode_gates([mode], None, options)[mode]
    checked.check(_heaviest(built, options, multi_step))
    if isinstance(built, Cascade):
        return mode, replace(options, router=built.first, answer_gate=built.answer_gate)
    return ROUTER, replace(options, router=built)


def _heaviest(gate: Gate, options: ModeOptions, multi_step: MultiStepConfig) -> int:
    """The steps of the dearest question `gate` can route (as the service weighs it,
    `AdaptiveRAG.steps_config`): a multi-step strategy's own max_steps, else --max-steps."""
    from ..rag.decisions import check_router, routed_strategies

    registry = check_router(gate, options.budget, options.strategies)
    specs = [registry[s] for s in routed_strategies(gate, registry)]
    return max((s.max_steps or multi_step.max_steps for s in specs if s.multi_step), default=1)


def run(args: argparse.Namespace) -> int:
    with not_waiting_on_threads():  # Ctrl-C while a generator server holds a request
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from ..rag.backends import open_gate, open_rag
    from ..rag.service import serve

    # every flag and path before any engine starts (the gate's in open_gate / open_rag)
    checked = limits(args)
    check_bind(args.host, args.port, args.api_key)
    if args.mode == "gate":
        _no_engine_flags(args)
    gate = _gate_mode(args)
    options = mode_options(args, [gate])
    engine = generator_kwargs(args)
    multi_step = multi_step_config(args)
    if args.mode == "gate":
        service = open_gate(gate, options)
    else:
        gate, options = _gate_before_engine(gate, options, multi_step, checked)
        service = open_rag(
            gate,
            retriever=args.retriever,
            corpus=args.corpus,
            k=args.k,
            max_new_tokens=args.max_new_tokens,
            mode_options=options,
            multi_step=multi_step,
            # a remote generator's request (retries included) gives up when the HTTP request
            # it serves has: a stuck server held the engine 20 minutes a call
            deadline=checked.request_timeout,
            **engine,
        )
    serve(service, args.host, args.port, checked, args.api_key, options.strategies,
          options.budget if args.mode == "gate" else None)  # fmt: skip
    return 0
