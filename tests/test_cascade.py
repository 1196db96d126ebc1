"""The cascade in the RAG loop (issue 37 part 4): the router decides first; the answer gate
reads the closed-book answers' log-probabilities and escalates the unsure ones to the next
strategy, within the budget's slack; escalated answers are charged both LLM calls."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from retrieval_gate.errors import BackendError, ConfigError
from retrieval_gate.gates.base import as_questions
from retrieval_gate.generation.base import Generation
from retrieval_gate.questions import Question
from retrieval_gate.rag import AdaptiveRAG, OracleGate
from retrieval_gate.rag.cascade import Cascade, check_logprobs, escalations
from retrieval_gate.retrieval import ContextRetriever
from routers import AnswerConfidenceGate, LengthRouter


class SureOnEven:
    """Closed-book: 'I don't know' with log-probabilities sure for even items, unsure for odd
    ones; with a paragraph, its last word. Records each batched call."""

    name, checksum = "sure-on-even", "none"

    def __init__(self, logprobs: bool = True):
        self.calls: list[list[str]] = []
        self.logprobs = logprobs

    def generate(self, prompts: Sequence[str], max_new_tokens: int = 24, logprobs: bool = False):
        self.calls.append(list(prompts))
        out = []
        for p in prompts:
            if "Paragraph:\n" in p:
                text = (p.split("Paragraph:\n")[1].split("\n\nQuestion:")[0].split() or ["-"])[-1]
            else:
                text = "I don't know"
            item = next((int(w.rstrip("?")) for w in p.split() if w.rstrip("?").isdigit()), 0)
            lps = [-0.01, -0.02] if item % 2 == 0 else [-2.5, -3.0]
            out.append(Generation(text, len(p.split()), 2, lps if logprobs and self.logprobs
                                  else None))  # fmt: skip
        return out

    def choice_probs(self, prompts, choices):
        return np.full((len(prompts), len(choices)), 1 / len(choices))


def _questions(n: int = 6) -> list[Question]:
    return [Question(id=f"q{i}", text=f"What is item {i}?", answers=(f"answer{i}",),
                     source="test", contexts=({"title": "", "text": f"item {i} is answer{i}"},))
            for i in range(n)]  # fmt: skip


def test_a_binary_gate_cascade_escalates_the_unsure_closed_book_answers():
    qs = _questions(6)
    gen = SureOnEven()
    never = OracleGate({q.id: 0 for q in qs})  # the first gate keeps every question closed-book
    run = AdaptiveRAG(Cascade(never, AnswerConfidenceGate()), ContextRetriever(), gen).run(qs)
    assert len(gen.calls) == 2 and len(gen.calls[0]) == 6 and len(gen.calls[1]) == 3
    assert [a.escalated for a in run.answers] == [False, True] * 3
    assert [a.match for a in run.answers] == [False, True] * 3  # escalated ones read the docs
    assert [a.llm_calls for a in run.answers] == [1, 2] * 3
    assert [a.retrievals for a in run.answers] == [0, 1] * 3
    c = run.costs
    assert (c.escalations, c.llm_calls, c.retrievals, c.generation_calls) == (3, 9, 3, 2)
    assert c.prompt_tokens == sum(len(p.split()) for call in gen.calls for p in call)
    parts = c.gate_seconds + c.retrieval_seconds + c.generation_seconds + c.overhead_seconds
    assert parts == pytest.approx(c.total_seconds)


def test_a_router_cascade_escalates_within_the_budget_slack():
    qs = _questions(6)  # four words each: the router keeps them all closed-book
    router = LengthRouter(costs={"no_retrieval": 0.0, "one_retrieval": 1.0, "multi_step": 3.0})
    loop = AdaptiveRAG(Cascade(router, AnswerConfidenceGate()), ContextRetriever(), SureOnEven())
    assert loop.run(qs).costs.escalations == 3  # no budget: the answer gate alone decides
    assert loop.run(qs, budget=0.34).costs.escalations == 2  # 6 x 0.34 pays for two
    assert loop.run(qs, budget=0.0).costs.escalations == 0
    picked = escalations(np.array([0.9, 0.2, 0.7, 0.95]), 0.5, 2.0, 1.0)
    assert picked == [0, 3]  # the two surest-wrong, in input order
    # a priced closed-book answer: the slack already paid for it, and an escalation adds the
    # whole next strategy's price (not the difference): 6 x 0.9 - 6 x 0.5 = 2.4 pays for two
    priced = LengthRouter(costs={"no_retrieval": 0.5, "one_retrieval": 1.0, "multi_step": 3.0})
    loop = AdaptiveRAG(Cascade(priced, AnswerConfidenceGate()), ContextRetriever(), SureOnEven())
    assert loop.run(qs, budget=0.9).costs.escalations == 2


def test_a_gate_that_reads_no_answer_or_a_generator_without_logprobs_is_refused():
    qs = _questions(2)
    plain = OracleGate({q.id: 0 for q in qs})
    with pytest.raises(ConfigError, match="--answer-gate.*cascade-closed-book"):
        Cascade(plain, plain)
    with pytest.raises(BackendError, match="--generator-url.*no token log-probabilities"):
        check_logprobs(SureOnEven(logprobs=False), "--generator-url")
    check_logprobs(SureOnEven(), "--generator-url")


def test_a_served_cascade_reports_its_escalations():
    from fastapi.testclient import TestClient

    from retrieval_gate.rag.service import create_app

    class Never:  # scores any question, ids or not
        name, threshold = "never", 0.5

        def scores(self, questions):
            return np.zeros(len(as_questions(questions)))

    qs = _questions(4)
    loop = AdaptiveRAG(Cascade(Never(), AnswerConfidenceGate()), ContextRetriever(), SureOnEven())
    with TestClient(create_app(loop)) as client:
        r = client.post("/answer", json={"questions": [q.text for q in qs]})
        assert r.status_code == 200, r.text
        answers = r.json()["answers"]
        metrics = client.get("/metrics").text
        health = client.get("/health").json()["metrics"]
    assert [a["escalated"] for a in answers] == [False, True] * 2
    assert [a["llm_calls"] for a in answers] == [1, 2] * 2
    assert "retrieval_gate_escalations_total 2.0" in metrics
    assert health["escalations"] == 2 and health["llm_calls"]["total"] == 6


def test_a_gate_mode_cascade_reads_the_answers_score_requests_send():
    """`serve --mode gate --router R --answer-gate A` served the router alone (then was
    refused): now /score reads each kept question's token_logprobs, as `score --answer-gate`
    reads its column, and escalates the unsure ones within the request's budget."""
    from fastapi.testclient import TestClient

    from retrieval_gate.rag.backends import open_gate
    from retrieval_gate.rag.modes import ModeOptions
    from retrieval_gate.rag.service import create_app

    gate = open_gate(
        "cascade", ModeOptions(router=LengthRouter(), answer_gate=AnswerConfidenceGate())
    )
    assert isinstance(gate, Cascade)
    texts = ["Capital of France?", "Capital of Peru?", "Who wrote the novel Hamlet, and when?",
             "Capital of Chad?", "Capital of Mali?"]  # fmt: skip
    sent = [[0.0, -0.01], [-3.0, -2.0], [-3.0], None, [-2.5]]
    with TestClient(create_app(gate)) as client:
        r = client.post("/score", json={"questions": texts, "token_logprobs": sent})
        assert r.status_code == 200, r.text
        items = r.json()["scores"]
        # at 0.4 a question the router keeps all closed-book, and the slack (2 retrievals)
        # pays for two of the three unsure answers: the surest-wrong first (ties: in order)
        capped = client.post("/score", json={"questions": texts, "token_logprobs": sent,
                                             "budget": 2.0 / len(texts)}).json()["scores"]  # fmt: skip
        unread = client.post("/score", json={"questions": texts}).json()["scores"]
        health = client.get("/health").json()
    assert [i["strategy"] for i in items] == ["no_retrieval", "one_retrieval", "one_retrieval",
                                              "no_retrieval", "one_retrieval"]  # fmt: skip
    assert [i["escalated"] for i in items] == [False, True, None, None, True]
    assert items[0]["answer_score"] < 0.5 <= items[1]["answer_score"]
    assert items[2]["answer_score"] is None  # the router retrieves: no answer read
    assert [i["escalated"] for i in capped] == [False, True, True, None, False]
    assert [i["strategy"] for i in unread] == ["no_retrieval", "no_retrieval", "one_retrieval",
                                               "no_retrieval", "no_retrieval"]  # fmt: skip
    assert health["mode"] == "gate" and health["metrics"]["escalations"] == 4


@pytest.mark.parametrize(
    ("sent", "says"),
    [  # pydantic said "token_logprobs.0: Input should be a valid list; token_logprobs.1: ..."
        ([-0.1, -2.3], "token_logprobs: one list per question, of its answer's token "
         "log-probabilities, e.g. [[-0.1, -2.3]] for one question (or null where there is no "
         "answer)"),
        ([[0.5]], "token_logprobs.0.0: 0.5 is above 0; a log-probability is 0 or below"),
        ([[]], "token_logprobs.0: an empty list; an answer has at least one token: send null"),
        ([[-0.1], [-0.2]], "token_logprobs has 2 entries for 1 question: give one list (or None, "
         "null in JSON) per question"),
    ],
)  # fmt: skip
def test_a_gate_mode_cascades_answers_sent_in_the_wrong_shape_say_the_shape(sent, says):
    from fastapi.testclient import TestClient

    from retrieval_gate.rag.backends import open_gate
    from retrieval_gate.rag.modes import ModeOptions
    from retrieval_gate.rag.service import create_app

    gate = open_gate(
        "cascade", ModeOptions(router=LengthRouter(), answer_gate=AnswerConfidenceGate())
    )
    with TestClient(create_app(gate)) as client:
        r = client.post("/score", json={"questions": ["Capital of Peru?"], "token_logprobs": sent})
    detail = r.json()["detail"]
    assert r.status_code == 422 and detail.startswith(says), r.text
    assert "; token_logprobs" not in detail  # one reason, said once (not once per item)


def test_a_gate_mode_cascade_with_nothing_to_escalate_to_is_refused_at_start():
    from retrieval_gate.rag.service import create_app

    alone = Cascade(LengthRouter(strategies=("no_retrieval",)), AnswerConfidenceGate())
    with pytest.raises(ConfigError, match="a dearer one to escalate to"):
        create_app(alone)


def test_each_questions_own_budget_caps_its_escalations():
    """A list of budgets (the service batches requests of different budgets) was dropped for
    the loop's own: budget 0 escalated as if there were none. Each budget's questions now
    escalate within their own slack, as a run at that budget alone."""
    from fastapi.testclient import TestClient

    from retrieval_gate.rag.service import create_app

    qs = _questions(6)
    router = LengthRouter(costs={"no_retrieval": 0.0, "one_retrieval": 1.0, "multi_step": 3.0})
    loop = AdaptiveRAG(Cascade(router, AnswerConfidenceGate()), ContextRetriever(), SureOnEven())
    run = loop.run(qs + qs, budget=[0.0] * 6 + [None] * 6)
    assert [a.escalated for a in run.answers] == [False] * 6 + [False, True] * 3
    assert loop.run(qs, budget=[0.34] * 6).costs.escalations == 2  # as budget=0.34
    with TestClient(create_app(loop)) as client:
        texts = [q.text for q in qs]
        held = client.post("/answer", json={"questions": texts, "budget": 0})
        free = client.post("/answer", json={"questions": texts})
    assert held.status_code == 200 and free.status_code == 200, (held.text, free.text)
    assert held.json()["costs"]["escalations"] == 0, held.json()["answers"]
    assert free.json()["costs"]["escalations"] == 3
