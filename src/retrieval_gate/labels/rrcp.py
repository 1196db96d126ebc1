"""`rrcp` policy: RRCP answerability and completeness (Gabburo et al.) over the top-k
retrieved documents.

Per document i an evaluator gives an answer-correctness score s_i against the gold answers:
- `overlap` (default): 1.0 when a normalised gold answer is contained in the document, else
  half the best share of a gold answer's tokens found in it (partial evidence counts half);
- `llm`: the generator's P(Yes) to "does the document contain the answer?" with the gold
  answer as reference (a reference-based judge, as GenEval is);
- `mean`: the average of the two.
Answerability Ans = max_i s_i >= T_ans. Completeness: each document's relevance over the
question's tokens (for each question token, its best cosine to any document token, MiniLM
token embeddings, clipped at 0) normalised to a distribution; S_D = the mean over documents
of its normalised entropy; Com = S_D >= T_com. Retrieval-complex = not Ans and Com.

Labels: label3 = 0 when the closed-book answer is right (no retrieval needed), 1 when it is
wrong and a retrieved document answers (Ans), 2 when it is wrong and the question is
retrieval-complex; null otherwise (retrieval as done here cannot help). label = label3 > 0.

Rows: id, label, label3, ans, com, complex, max_s, s_d, max_s_overlap, max_s_llm."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..generation.base import Generator
from ..generation.prompts import DOC_JUDGE_CHOICES, DOC_JUDGE_ID, doc_judge_prompt, document_texts
from ..questions import Question, normalize_answer
from ..retrieval.base import Retriever
from ..retrieval.dense import MiniLMEncoder
from .closed_book import closed_book_rows
from .label_files import LabelFile
from .policy_loop import run_policy
from .rag_gain import TOP_K
from .scoring import DEFAULT_CRITERION, correct, measures

T_ANS = 0.15
T_COM = 0.80
EVALUATORS = ("overlap", "llm", "mean")


def overlap_score(document: str, answers: Sequence[str]) -> float:
    """1.0 for a contained gold answer, else 0.5 x the best gold-token recall."""
    doc = normalize_answer(document)
    doc_tokens = set(doc.split())
    best = 0.0
    for a in answers:
        gold = normalize_answer(a)
        if not gold:
            continue
        if gold in doc:
            return 1.0
        toks = gold.split()
        best = max(best, 0.5 * sum(t in doc_tokens for t in toks) / len(toks))
    return best


def normalised_entropy(relevance: np.ndarray) -> float:
    """Entropy of relevance/sum(relevance) divided by log(n): 1 = spread evenly over all
    question tokens, 0 = all on one token (or no relevance at all, or a single token)."""
    r = np.clip(np.asarray(relevance, dtype=float), 0.0, None)
    if r.size < 2 or r.sum() <= 0:
        return 0.0
    p = r / r.sum()
    nz = p[p > 0]
    return float(-(nz * np.log(nz)).sum() / np.log(r.size))


def token_relevance(question_emb: np.ndarray, doc_emb: np.ndarray) -> np.ndarray:
    """Per question token, its best cosine to any document token (unit rows), clipped at 0."""
    if len(question_emb) == 0 or len(doc_emb) == 0:
        return np.zeros(len(question_emb))
    return np.clip((question_emb @ doc_emb.T).max(axis=1), 0.0, None)


def completeness(question_emb: np.ndarray, doc_embs: Sequence[np.ndarray]) -> float:
    """S_D: the mean normalised entropy of each document's relevance over question tokens."""
    if not doc_embs:
        return 0.0
    return float(np.mean([normalised_entropy(token_relevance(question_emb, d)) for d in doc_embs]))


def rrcp_decision(
    scores: Sequence[float], s_d: float, t_ans: float = T_ANS, t_com: float = T_COM
) -> dict[str, Any]:
    """Ans, Com and retrieval-complex from the per-document scores and S_D."""
    max_s = float(max(scores)) if len(scores) else 0.0
    ans = max_s >= t_ans
    com = s_d >= t_com
    return {"ans": ans, "com": com, "complex": (not ans) and com, "max_s": round(max_s, 4)}


def rrcp_label3(closed_ok: bool, ans: bool, is_complex: bool) -> int | None:
    if closed_ok:
        return 0
    if ans:
        return 1
    return 2 if is_complex else None


class RRCPScorer:
    """Scores questions against retrieved documents; one batched judge call per chunk."""

    def __init__(
        self,
        generator: Generator | None,
        encoder: MiniLMEncoder,
        evaluator: str = "overlap",
        t_ans: float = T_ANS,
        t_com: float = T_COM,
    ):
        if evaluator not in EVALUATORS:
            raise ConfigError(f"unknown RRCP evaluator {evaluator!r}; choose one of {EVALUATORS}")
        if evaluator != "overlap" and generator is None:
            raise ConfigError(f"RRCP evaluator {evaluator!r} needs a generator")
        self.generator, self.encoder = generator, encoder
        self.evaluator, self.t_ans, self.t_com = evaluator, t_ans, t_com

    def judge_scores(self, questions: Sequence[Question], docs: list[list[str]]) -> list[list]:
        """P(Yes) per (question, document), one `choice_probs` call for the chunk."""
        if self.generator is None:
            return [[None] * len(d) for d in docs]
        prompts = [
            doc_judge_prompt(q.text, d, q.answers[0] if q.answers else "")
            for q, ds in zip(questions, docs, strict=True)
            for d in ds
        ]
        probs = self.generator.choice_probs(prompts, DOC_JUDGE_CHOICES)[:, 0] if prompts else []
        out, i = [], 0
        for ds in docs:
            out.append([float(p) for p in probs[i : i + len(ds)]])
            i += len(ds)
        return out

    def score(self, questions: Sequence[Question], docs: list[list[str]]) -> list[dict]:
        llm = self.judge_scores(questions, docs)
        q_embs = self.encoder.token_embeddings([q.text for q in questions])
        flat = self.encoder.token_embeddings([d for ds in docs for d in ds])
        rows, i = [], 0
        for q, ds, qe, lj in zip(questions, docs, q_embs, llm, strict=True):
            d_embs = flat[i : i + len(ds)]
            i += len(ds)
            ov = [overlap_score(d, q.answers) for d in ds]
            s = self._combine(ov, lj)
            s_d = completeness(qe, d_embs)
            rows.append(
                {
                    **rrcp_decision(s, s_d, self.t_ans, self.t_com),
                    "s_d": round(s_d, 4),
                    "max_s_overlap": round(max(ov, default=0.0), 4),
                    "max_s_llm": None if None in lj else round(max(lj, default=0.0), 4),
                }
            )
        return rows

    def _combine(self, overlap: list[float], llm: list) -> list[float]:
        if self.evaluator == "overlap":
            return overlap
        if self.evaluator == "llm":
            return llm
        return [(a + b) / 2 for a, b in zip(overlap, llm, strict=True)]


def rrcp_rows(
    scorer: RRCPScorer,
    retriever: Retriever,
    questions: Sequence[Question],
    closed: dict[str, dict[str, Any]],
    closed_fn: Any,
    criterion: str = DEFAULT_CRITERION,
    k: int = TOP_K,
) -> list[dict[str, Any]]:
    missing = [q for q in questions if q.id not in closed]
    if missing:
        closed = {**closed, **{r["id"]: r for r in closed_fn(missing)}}
    docs = [document_texts(h) for h in retriever.retrieve(questions, k)]
    rows = []
    for q, scored in zip(questions, scorer.score(questions, docs), strict=True):
        l3 = rrcp_label3(correct(closed[q.id], criterion), scored["ans"], scored["complex"])
        label = None if l3 is None else int(l3 > 0)
        closed_m = measures(closed[q.id])
        rows.append({"id": q.id, "label": label, "label3": l3, **scored, "closed": closed_m})
    return rows


def label_rrcp(
    generator: Generator,
    retriever: Retriever,
    questions: Sequence[Question],
    out: LabelFile,
    closed: LabelFile,
    criterion: str = DEFAULT_CRITERION,
    chunk_size: int = 128,
    k: int = TOP_K,
    evaluator: str = "overlap",
    llm_judge: bool = True,
    t_ans: float = T_ANS,
    t_com: float = T_COM,
) -> dict[str, float]:
    """`llm_judge=False` skips the (costly) P(Yes) judge unless the evaluator needs it."""
    from .closed_book import source_frequent_answers

    frequent = source_frequent_answers(questions)
    judge = generator if (llm_judge or evaluator != "overlap") else None
    scorer = RRCPScorer(judge, MiniLMEncoder(), evaluator, t_ans, t_com)
    return run_policy(
        "rrcp",
        generator,
        questions,
        out,
        lambda qs: rrcp_rows(
            scorer,
            retriever,
            qs,
            closed.rows,
            lambda m: closed_book_rows(generator, m, frequent),
            criterion,
            k,
        ),
        chunk_size,
        prompt_id=DOC_JUDGE_ID if judge else None,
        closed_book_file=closed.path.name,
        retriever=retriever.name,
        top_k=k,
        evaluator=evaluator,
        t_ans=t_ans,
        t_com=t_com,
        encoder="minilm",
        criterion=criterion,
    )
