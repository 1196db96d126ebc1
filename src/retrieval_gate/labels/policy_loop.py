"""The resumable, chunked labelling loop every generator policy shares, and `run_policy`,
which the generator policies (closed-book, rag-gain, rrcp) plug their row function into.

Questions go to the generator in chunks (default 512): each chunk is ONE batched generator
call, and its rows are appended and flushed before the next chunk starts, so an interrupted
run loses at most the chunk in flight and a re-run skips every id already in the file."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from typing import Any

from tqdm import tqdm

from .. import __version__
from ..generation.base import Generator
from ..questions import Question
from .label_files import LabelFile

ChunkFn = Callable[[list[Question]], list[dict[str, Any]]]


def pending(questions: Sequence[Question], done: set[str]) -> list[Question]:
    seen: set[str] = set()
    out = []
    for q in questions:
        if q.id not in done and q.id not in seen:
            seen.add(q.id)
            out.append(q)
    return out


def run_chunked(
    questions: Sequence[Question],
    out: LabelFile,
    compute: ChunkFn,
    chunk_size: int = 512,
    desc: str = "labelling",
) -> dict[str, float]:
    """Computes rows for the questions not yet in `out`, chunk by chunk, appending each chunk.
    Returns the throughput of this run (questions, seconds, questions per second)."""
    todo = pending(questions, out.done_ids())
    start = time.perf_counter()
    with tqdm(total=len(todo), desc=desc, unit="q") as bar:
        for i in range(0, len(todo), chunk_size):
            part = todo[i : i + chunk_size]
            out.append(compute(part))
            bar.update(len(part))
    seconds = time.perf_counter() - start
    return {
        "questions": len(todo),
        "seconds": round(seconds, 2),
        "questions_per_second": round(len(todo) / seconds, 2) if todo and seconds else 0.0,
    }


def provenance(policy: str, **fields: Any) -> dict[str, Any]:
    """The `.meta.json` record: policy, date, package version and what the policy adds."""
    return {
        "policy": policy,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "package_version": __version__,  # as run folders and exports record it
        **fields,
    }


def run_policy(
    policy: str,
    generator: Generator,
    questions: Sequence[Question],
    out: LabelFile,
    compute: ChunkFn,
    chunk_size: int,
    **fields: Any,
) -> dict[str, float]:
    """One generator policy's run: provenance (the generator's name, checksum and backend, and
    the policy's `fields`) is written before the first row, so a label file never lacks it;
    then the chunked, resumable loop (or the generator's own `run_rows`: the Ray engine's);
    then the provenance again with this run's throughput."""
    meta = provenance(
        policy,
        generator=generator.name,
        generator_checksum=generator.checksum,
        backend=getattr(generator, "backend", "?"),
        **fields,
        **getattr(generator, "provenance", {}),
    )
    out.write_meta(meta)
    # a generator may bring its own loop over the same row function (labels/ray_engine.py)
    loop = getattr(generator, "run_rows", run_chunked)
    stats = loop(questions, out, compute, chunk_size, policy)
    out.write_meta({**meta, "last_run": stats, "rows": len(out.rows)})
    return stats
