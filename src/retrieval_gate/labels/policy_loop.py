"""The resumable, chunked labelling loop every generator policy shares, and `run_policy`,
which the generator policies (closed-book, rag-gain, rrcp) plug their row function into.

Questions go to the generator in chunks (default 512): each chunk is ONE batched generator
call, and its rows are appended and flushed before the next chunk starts, so an interrupted
run loses at most the chunk in flight and a re-run skips every id already in the file. A
question whose prompt a server refused for good (`PromptRefused`) is listed in
`<file>.failed.jsonl`, as the Ray engine lists its failures, and the run goes on. That list is
written through the folder's ledger (`outputs.write_owned`): a file of that name that no label
run wrote (the user's) is refused by name before any engine starts (`check_failures_ours`),
never emptied or replaced."""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .. import __version__
from ..errors import PromptRefused
from ..generation.base import Generator
from ..outputs import refuse_foreign, vouch_for, write_owned
from ..questions import Question
from ..strict_rows import parse_json
from .label_files import LabelFile, meta_path, read_meta

ChunkFn = Callable[[list[Question]], list[dict[str, Any]]]
log = logging.getLogger(__name__)


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
) -> dict[str, Any]:
    """Computes rows for the questions not yet in `out`, chunk by chunk, appending each chunk.
    Returns the throughput of this run (questions, seconds, questions per second) and its
    failed questions (`failed`, `failed_file`)."""
    check_failures_ours(out.path)  # before the first question is asked
    todo = pending(questions, out.done_ids())
    start = time.perf_counter()
    failed: list[dict[str, Any]] = []
    listed = listed_failures(out.path)  # a re-run asks them again: refused again, as expected
    with tqdm(total=len(todo), desc=desc, unit="q") as bar:
        for i in range(0, len(todo), chunk_size):
            part = todo[i : i + chunk_size]
            refused = _append_answered(out, compute, part)
            failed += refused
            new = [r for r in refused if r["id"] not in listed]
            if len(part) > 1 and len(refused) == len(part) and new:  # the server's doing
                with_failures({}, out.path, failed)  # listed all the same, earlier chunks' too
                raise PromptRefused(f"the generator refused every question of a chunk of "
                                    f"{len(part)} (e.g. {new[0]['id']}: {new[0]['error']})")  # fmt: skip
            bar.update(len(part))
    seconds = time.perf_counter() - start
    answered = len(todo) - len(failed)
    stats: dict[str, Any] = {
        "questions": answered,
        "seconds": round(seconds, 2),
        "questions_per_second": round(answered / seconds, 2) if todo and seconds else 0.0,
    }
    return with_failures(stats, out.path, failed)


def _append_answered(out: LabelFile, compute: ChunkFn, part: list[Question]) -> list[dict]:
    """Appends the rows of `part`. A prompt a server refused for good fails the whole call:
    the chunk is halved until the refused questions stand alone (the answers given meanwhile
    come back from the generation cache, when it is on), and those are returned, unwritten."""
    try:
        out.append(compute(part))
        return []
    except PromptRefused as e:
        if len(part) == 1:
            return [{"id": part[0].id, "error": str(e)}]
    half = len(part) // 2
    return _append_answered(out, compute, part[:half]) + _append_answered(out, compute, part[half:])


def failures_path(label_path: Path) -> Path:
    return label_path.with_name(label_path.name.removesuffix(".jsonl") + ".failed.jsonl")


def listed_failures(label_path: Path) -> set[str]:
    """The ids the last run listed as failed (none where the list is missing or damaged)."""
    try:
        lines = failures_path(label_path).read_text(encoding="utf-8").splitlines()
        return {str(json.loads(line)["id"]) for line in lines if line.strip()}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def check_failures_ours(label_path: Path) -> None:
    """Refuses, by name, a `<file>.failed.jsonl` beside the label file that no label run wrote
    (or that was changed since): `with_failures` rewrites that list each run, so a user's file
    of that name would be emptied or replaced. Ours: the folder's ledger records it as it is;
    one written before the ledger is recognised by its rows (id and error, each) beside a label
    file a label run made, and recorded as it is now (`outputs.vouch_for`)."""
    path = failures_path(label_path)
    if not path.exists():
        return
    if _listed_by_a_run(label_path, path):
        vouch_for(path)  # recorded only where the ledger has no entry for it
    refuse_foreign([path], "--out")


# the fields of a failed question's row: a local run's id and error, a Ray run's attempts too
_FAILURE_FIELDS = {"id", "error", "attempts"}


def _listed_by_a_run(label_path: Path, path: Path) -> bool:
    """`path` reads as a list of failed questions, beside a label file a label run made."""
    mp = meta_path(label_path)
    try:
        if not (mp.is_file() and isinstance(read_meta(mp).get("policy"), str)):
            return False
        rows = [parse_json(line) for line in path.read_bytes().splitlines() if line.strip()]
    except (OSError, ValueError):  # unreadable, not JSON, damaged provenance: not recognised
        return False
    return all(isinstance(r, dict) and {"id", "error"} <= r.keys() <= _FAILURE_FIELDS for r in rows)


def with_failures(stats: dict[str, Any], label_path: Path, failed: list[dict]) -> dict[str, Any]:
    """The run's stats with its failed questions, listed in `<file>.failed.jsonl` (rewritten
    each run: a retried question that succeeds leaves the list; emptied when none failed), only
    where no file of that name is there or a label run wrote the one there
    (`check_failures_ours`)."""
    path = failures_path(label_path)
    stats["failed"] = len(failed)
    if failed or path.exists():
        check_failures_ours(label_path)
        text = "".join(json.dumps(f, sort_keys=True) + "\n" for f in failed)
        write_owned(path, text, "--out")
    if failed:
        stats["failed_file"] = str(path)
        log.warning("%d questions failed after retries: listed in %s; run again to retry them",
                    len(failed), path)  # fmt: skip
    return stats


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
) -> dict[str, Any]:
    """One generator policy's run: provenance (the generator's name, checksum and backend, and
    the policy's `fields`) is written before the first row, so a label file never lacks it;
    then the chunked, resumable loop (or the generator's own `run_rows`: the Ray engine's),
    the provenance written again before a chunk's rows where the generator's changed (a
    server's says how its answers were asked once it was seen to reason: an interrupted run's
    file records it too); then the provenance again with this run's throughput."""
    meta = provenance(
        policy,
        generator=generator.name,
        generator_checksum=generator.checksum,
        backend=getattr(generator, "backend", "?"),
        **fields,
        **getattr(generator, "provenance", {}),
    )
    out.write_meta(meta)

    def noted(part: list[Question]) -> list[dict[str, Any]]:
        rows = compute(part)
        now = {**meta, **getattr(generator, "provenance", {})}
        if now != meta:
            meta.update(now)
            out.write_meta(meta)
        return rows

    # a generator may bring its own loop over the same row function (labels/ray_engine.py)
    loop = getattr(generator, "run_rows", run_chunked)
    stats = loop(questions, out, noted, chunk_size, policy)
    out.write_meta({**meta, **getattr(generator, "provenance", {}), "last_run": stats,
                    "rows": len(out.rows)})  # fmt: skip
    return stats
