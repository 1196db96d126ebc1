"""`closed-book` policy: the generator answers with RetrievalQA's closed-book prompt; a question
needs retrieval (label 1) when the answer is not correct under the chosen criterion.

Rows: id, label, prediction, match, em, f1, idk, guess, mean_logprob, and `token_logprobs` (the
answer's token log-probabilities, `labels.logprobs`) when the generator returned them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..data import dataset_names, load_dataset
from ..generation.base import Generator
from ..generation.prompts import CLOSED_BOOK_ID, closed_book_prompt
from ..questions import Question
from .label_files import LabelFile
from .logprobs import TOKEN_LOGPROBS, rounded
from .policy_loop import run_policy
from .scoring import DEFAULT_CRITERION, correct, frequent_answers, judge

MAX_NEW_TOKENS = 24
PREDICTION_CHARS = 200  # predictions are kept for inspection, trimmed to keep files small


def source_frequent_answers(questions: Sequence[Question]) -> dict[tuple[str, str], set[str]]:
    """Frequent answers per relation from the whole of each bundled source the questions come
    from (not the sample being labelled, so a --limit run judges guesses the same way); a
    source of your own (a question file) gives them from the questions given."""
    bundled = set(dataset_names())
    pool: list[Question] = []
    for source in sorted({q.source for q in questions}):
        if source in bundled:
            pool.extend(load_dataset(source))
        else:
            pool.extend(q for q in questions if q.source == source)
    return frequent_answers(pool)


def closed_book_rows(
    generator: Generator,
    questions: Sequence[Question],
    frequent: dict[tuple[str, str], set[str]],
    criterion: str = DEFAULT_CRITERION,
    max_new_tokens: int = MAX_NEW_TOKENS,
) -> list[dict[str, Any]]:
    """One batched generation over `questions`, judged."""
    gens = generator.generate(
        [closed_book_prompt(q.text) for q in questions], max_new_tokens, logprobs=True
    )
    rows = []
    for q, g in zip(questions, gens, strict=True):
        row = {"id": q.id, "prediction": g.text[:PREDICTION_CHARS], **judge(g.text, q, frequent)}
        lp = g.mean_logprob
        row["mean_logprob"] = None if lp is None else round(lp, 4)
        if g.token_logprobs:
            row[TOKEN_LOGPROBS] = rounded(g.token_logprobs)
        row["label"] = int(not correct(row, criterion))
        rows.append(row)
    return rows


def decoding(max_new_tokens: int = MAX_NEW_TOKENS) -> dict[str, Any]:
    return {"temperature": 0.0, "max_new_tokens": max_new_tokens, "chat_template": True}


def label_closed_book(
    generator: Generator,
    questions: Sequence[Question],
    out: LabelFile,
    criterion: str = DEFAULT_CRITERION,
    chunk_size: int = 512,
) -> dict[str, float]:
    """Labels the questions not yet in `out`; writes provenance first (so a file never lacks
    it) and again with the throughput at the end."""
    frequent = source_frequent_answers(questions)
    return run_policy(
        "closed-book",
        generator,
        questions,
        out,
        lambda qs: closed_book_rows(generator, qs, frequent, criterion),
        chunk_size,
        prompt_id=CLOSED_BOOK_ID,
        decoding=decoding(),
        criterion=criterion,
    )
