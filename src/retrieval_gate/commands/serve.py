"""`retrieval-gate serve`: the gate in front of a RAG service over HTTP."""

from __future__ import annotations

import argparse

from ..rag.modes import known_modes
from .rag import add_gate_args, add_generator_args, generator_kwargs, mode_options


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="HTTP: POST /answer {'questions': [...]}, GET /health")
    p.add_argument(
        "--gate", default="onnx", choices=known_modes(), help="gate in front (default: onnx)"
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-questions", type=int, default=64, help="per request")
    add_generator_args(p)
    add_gate_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..rag.backends import open_rag
    from ..rag.service import serve

    rag = open_rag(
        args.gate,
        retriever=args.retriever,
        corpus=args.corpus,
        k=args.k,
        max_new_tokens=args.max_new_tokens,
        mode_options=mode_options(args),
        **generator_kwargs(args),
    )
    serve(rag, args.host, args.port, args.max_questions)
    return 0
