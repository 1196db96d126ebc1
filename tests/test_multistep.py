"""The RAG loop's three strategies: IRCoT-style multi-step retrieval (batching, stopping, the
document cap, the context limit, failures), routing by a router or a binary gate, per-strategy
costs, the `multi-step` / `router` / three-way `oracle-run` modes, and flag checks.

Accounting tests use `routers.ScriptedGenerator` (deterministic, in-test) and the project's
real retrievers; the tests marked `vllm` run the real engine (tests/conftest.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from retrieval_gate.cli import main
from retrieval_gate.errors import BackendError, ConfigError, DataError, InputError
from retrieval_gate.generation.base import Generation
from retrieval_gate.generation.prompts import ANSWER_MARKER
from retrieval_gate.questions import Question
from retrieval_gate.rag import AdaptiveRAG, OracleGate, comparison_rows
from retrieval_gate.rag.decisions import DEFAULT_COSTS, FixedStrategy, strategy_costs
from retrieval_gate.rag.experiment import Pipeline, Sample, run_comparison
from retrieval_gate.rag.mode_comparison import ModeResult
from retrieval_gate.rag.modes import ModeOptions, build_mode_gates, check_modes, oracle_from_run
from retrieval_gate.rag.multistep import MultiStepConfig, final_answer, parse_step
from retrieval_gate.rag.oracle import OracleRouter
from retrieval_gate.retrieval import BM25Retriever, ContextRetriever, Document
from routers import DOCS, LengthRouter, ScriptedGenerator, WindowedScripted


class Recording:
    """A real retriever, delegated to, with each batched call's query texts recorded."""

    def __init__(self, inner):
        self.inner, self.name, self.calls = inner, inner.name, []

    def retrieve(self, questions, k=5):
        self.calls.append([q.text for q in questions])
        return self.inner.retrieve(questions, k)


def q(i: int, text: str, answers=("x",), contexts=()) -> Question:
    return Question(id=f"q{i}", text=text, answers=answers, source="test", contexts=contexts)


def multi(generator, retriever, k=2, **config) -> AdaptiveRAG:
    return AdaptiveRAG(FixedStrategy("multi_step"), retriever, generator, k=k,
                       multi_step=MultiStepConfig(**config))  # fmt: skip


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Hamlet was written in London. It is old.", ("Hamlet was written in London.", None)),
        ("A: So the answer is: the Romans.", ("", "the Romans")),
        ("London was founded. So the answer is: Romans", ("London was founded.", "Romans")),
        ("A: Atlanta\n\nQ: What? So the answer is:", ("Atlanta", None)),  # nothing after it
        ("A:", ("", None)),
        # a small model repeating the marker to its token limit gives no answer, not the marker
        ("Q: So the answer is: So the answer is: So the answer is: So the", ("", None)),
        ("So the answer is: the answer is: Paris.", ("", "Paris")),
        ("So the answer is: The answer is: The answer is: Th", ("", None)),
        # initials and short abbreviations end no sentence: "J." retrieved nothing useful
        ("J. K. Rowling wrote it. Then more.", ("J. K. Rowling wrote it.", None)),
        ("St. Louis, Missouri is big. Next.", ("St. Louis, Missouri is big.", None)),
        ("The U.S. Navy sank it. Later.", ("The U.S. Navy sank it.", None)),
        ("He was born in 1900. He died.", ("He was born in 1900.", None)),
    ],
)
def test_parse_step(text, expected):
    assert parse_step(text) == expected


def test_each_step_is_one_call_and_documents_keep_the_newest():
    questions = [q(1, "Who founded the city where Hamlet was written?", ("Romans",)),
                 q(2, "Where does the Seine flow through the capital?", ("Paris",)),
                 q(3, "What is the capital of France?", ("Paris",))]  # fmt: skip
    gen = ScriptedGenerator({
        questions[0].text: ["Hamlet was written in London.", "So the answer is: the Romans."],
        questions[1].text: ["The Seine is a river.", "Everest is high.", "Romans built roads."],
        questions[2].text: ["So the answer is: Paris."],
    })  # fmt: skip
    ret = Recording(BM25Retriever(DOCS))
    run = multi(gen, ret, k=2, max_steps=4, max_docs=2, step_k=1).run(questions)
    a1, a2, a3 = run.answers
    # step s of every unfinished question is ONE generator call, and one retrieval call
    assert [len(c) for c in gen.calls] == [3, 2, 1, 1]
    assert [len(c) for c in ret.calls] == [3, 2, 1, 1]
    assert ret.calls[1] == ["Hamlet was written in London.", "The Seine is a river."]
    assert (a1.answer, a1.llm_calls, a1.retrievals, a1.match) == ("the Romans", 2, 2, True)
    assert (a3.answer, a3.llm_calls, a3.retrievals) == ("Paris", 1, 1)
    # the step limit: the 4th (last) step asks for the answer, whatever the generator did
    assert a2.llm_calls == 4 and a2.retrievals == 4 and gen.calls[3][0].endswith(ANSWER_MARKER)
    assert a2.answer == "capital?" and a2.error is None  # the scripted answer after the limit
    assert [s["query"] for s in a2.steps] == [questions[1].text, "The Seine is a river.",
                                              "Everest is high.", "Romans built roads."]  # fmt: skip
    bm25 = BM25Retriever(DOCS)
    for step in a2.steps[1:]:  # at most 2 held, the newest (this step's retrieval) last
        top = bm25.retrieve([Question("s", step["query"], (), "t")], k=1)[0][0].document.id
        assert len(step["documents"]) <= 2 and step["documents"][-1] == top
    c = run.costs
    assert (c.llm_calls, c.retrievals, c.retrieved) == (7, 7, 3)
    assert (c.generation_calls, c.retrieval_calls) == (4, 4)
    assert c.by_strategy["multi_step"].questions == 3
    assert c.prompt_tokens == sum(a.prompt_tokens for a in run.answers) > 0


def test_a_router_mixes_strategies_in_one_first_call():
    questions = [q(1, "Capital of France?"), q(2, "Who wrote the tragedy Hamlet in London?"),
                 q(3, "Who founded the city where the tragedy Hamlet was written, and when?")]  # fmt: skip
    gen, ret = ScriptedGenerator(), Recording(BM25Retriever(DOCS))
    run = AdaptiveRAG(LengthRouter(), ret, gen, k=2).run(questions)
    assert [a.strategy for a in run.answers] == ["no_retrieval", "one_retrieval", "multi_step"]
    assert [a.retrieve for a in run.answers] == [False, True, True]
    assert [len(c) for c in gen.calls] == [3]  # closed-book, with-context and step 1 together
    assert [len(c) for c in ret.calls] == [2]
    by = run.costs.by_strategy
    assert {s: (c.questions, c.llm_calls, c.retrievals) for s, c in by.items()} == {
        "no_retrieval": (1, 1, 0), "one_retrieval": (1, 1, 1), "multi_step": (1, 1, 1)}  # fmt: skip
    assert sum(c.generation_seconds for c in by.values()) == pytest.approx(
        run.costs.generation_seconds
    )
    assert sum(c.retrieval_seconds for c in by.values()) == pytest.approx(
        run.costs.retrieval_seconds
    )
    assert run.answers[0].probability == pytest.approx(3 / 8)  # the router's own scores
    # a budget caps the router; per-question budgets route in one pass
    cheap = AdaptiveRAG(LengthRouter(), ret, gen, k=2, budget=1.0).run(questions)
    assert [a.strategy for a in cheap.answers] == ["no_retrieval", "one_retrieval", "one_retrieval"]
    mixed = AdaptiveRAG(LengthRouter(), ret, gen, k=2).run(questions, budget=[None, 0.0, 3.35])
    assert [a.strategy for a in mixed.answers] == ["no_retrieval", "no_retrieval", "multi_step"]


def test_a_binary_gate_picks_between_the_first_two():
    questions = [q(1, "Capital of France?"), q(2, "Who wrote Hamlet?")]
    gate = OracleGate({"q1": 0, "q2": 1})
    run = AdaptiveRAG(gate, BM25Retriever(DOCS), ScriptedGenerator(), k=1).run(questions)
    assert [a.strategy for a in run.answers] == ["no_retrieval", "one_retrieval"]
    with pytest.raises(ConfigError, match="binary gate"):
        AdaptiveRAG(gate, BM25Retriever(DOCS), ScriptedGenerator(), budget=1.0)


def test_strategies_a_router_names_must_be_known():
    ret, gen = BM25Retriever(DOCS), ScriptedGenerator()
    with pytest.raises(ConfigError, match="unknown strategy 'web_search'"):
        AdaptiveRAG(LengthRouter(strategies=("no_retrieval", "web_search")), ret, gen)
    with pytest.raises(ConfigError, match="must be one without retrieval"):
        AdaptiveRAG(LengthRouter(strategies=("one_retrieval", "multi_step")), ret, gen)
    two = LengthRouter(strategies=("no_retrieval", "one_retrieval"))
    two.route = lambda qs, budget=None: ["multi_step"] * len(qs)  # a router breaking its word
    with pytest.raises(BackendError, match="not one of its strategies"):
        AdaptiveRAG(two, ret, gen).run([q(1, "Who wrote Hamlet?")])
    with pytest.raises(ConfigError, match="^budget must be 0 or more"):
        AdaptiveRAG(LengthRouter(), ret, gen, budget=-1.0)


QUESTIONS = ["Capital of France?", "Who wrote the tragedy Hamlet in London?",
             "Who founded the city where the tragedy Hamlet was written, and when?"]  # fmt: skip


@pytest.mark.parametrize(
    "given, strategies",
    [
        (QUESTIONS, ["no_retrieval", "one_retrieval", "multi_step"]),  # bare strings
        ("Capital of France?", ["no_retrieval"]),  # one string is one question
        (
            np.array([q(i, t) for i, t in enumerate(QUESTIONS)], dtype=object),
            ["no_retrieval", "one_retrieval", "multi_step"],
        ),  # fmt: skip
        (
            (q(i, t) for i, t in enumerate(QUESTIONS)),
            ["no_retrieval", "one_retrieval", "multi_step"],
        ),
    ],
    ids=["strings", "one-string", "array", "generator"],
)
def test_the_loop_takes_questions_as_every_gate_does(given, strategies):
    rag = AdaptiveRAG(LengthRouter(), BM25Retriever(DOCS), ScriptedGenerator(), k=2)
    answers = rag.answer(given)
    assert [a.strategy for a in answers] == strategies
    assert all(a.error is None and a.answer for a in answers)


@pytest.mark.parametrize(
    "budget, message",
    [
        ([1.0], "^budget: 1 budgets for 3 questions"),
        ([1.0] * 4, "^budget: 4 budgets for 3 questions"),
        (np.array([1.0, 1.0]), "^budget: 2 budgets for 3 questions"),
        ("1.0", "^budget '1.0' is a string"),
        (float("nan"), "^budget must be 0 or more"),
        ([0.0, float("nan"), 1.0], r"^budget\[1\] must be 0 or more"),
        ((0.0, -1.0, 1.0), r"^budget\[1\] must be 0 or more"),
    ],
)
def test_a_run_budget_is_checked_like_the_constructors(budget, message):
    questions = [q(i, t) for i, t in enumerate(QUESTIONS)]
    rag = AdaptiveRAG(LengthRouter(), BM25Retriever(DOCS), ScriptedGenerator(), k=2)
    with pytest.raises(ConfigError, match=message):
        rag.run(questions, budget=budget)
    with pytest.raises(ConfigError, match=message):
        rag.decide(questions, budget)


def test_a_run_budget_may_be_a_numpy_array_of_one_per_question():
    questions = [q(i, t) for i, t in enumerate(QUESTIONS)]
    rag = AdaptiveRAG(LengthRouter(), BM25Retriever(DOCS), ScriptedGenerator(), k=2)
    run = rag.run(questions, budget=np.array([3.35, 0.0, 3.35]))
    assert [a.strategy for a in run.answers] == ["no_retrieval", "no_retrieval", "multi_step"]


@pytest.mark.parametrize(
    "given, message",
    [
        ({"k": "5"}, r"^k \(documents per question\) must be a whole number >= 1, got '5'"),
        ({"k": None}, "^k .* got None"),
        ({"k": 2.5}, "^k .* got 2.5"),
        ({"k": True}, "^k .* got True"),
        ({"max_new_tokens": -1}, "^max_new_tokens .* got -1"),
        ({"doc_words": -3}, "^doc_words .* got -3"),
        ({"doc_words": 0}, "^doc_words .* got 0"),
        ({"retriever": None}, "^retriever must be a retriever .* got None"),
        ({"generator": None}, "^generator must be a generator .* got None"),
    ],
)
def test_the_loop_refuses_bad_arguments_by_name(given, message):
    args = {"gate": LengthRouter(), "retriever": BM25Retriever(DOCS),
            "generator": ScriptedGenerator(), **given}  # fmt: skip
    with pytest.raises(ConfigError, match=message):
        AdaptiveRAG(**args)


class _Returns:
    """A retriever and generator that return what the test gives them (a misbehaving backend)."""

    name = checksum = "returns"

    def __init__(self, hits=None, generations=None):
        self.hits, self.generations = hits, generations

    def retrieve(self, questions, k=5):
        if self.hits is None:
            return BM25Retriever(DOCS).retrieve(questions, k)
        return self.hits(questions, k)

    def generate(self, prompts, max_new_tokens=24, logprobs=False):
        if self.generations is None:
            return ScriptedGenerator().generate(prompts, max_new_tokens)
        return self.generations(prompts)


@pytest.mark.parametrize(
    "backend, message",
    [
        (_Returns(generations=lambda p: None),
         "generator 'returns' returned None .*expected a list of Generation, one per prompt"),
        (_Returns(generations=lambda p: ["Paris"] * len(p)),
         "generator 'returns' returned 'Paris' .*for prompt 0: expected a Generation"),
        (_Returns(generations=lambda p: [Generation(None, 1, 1)] * len(p)),
         "a Generation whose text is None .*expected its text a str"),
        (_Returns(hits=lambda qs, k: None),
         "retriever 'returns' returned None .*expected a list of Hit lists, one per question"),
        (_Returns(hits=lambda qs, k: [None] * len(qs)),
         "returned None .*for question 0 .*expected a list of Hit"),
        (_Returns(hits=lambda qs, k: [DOCS[:k]] * len(qs)),
         r"returned Document\(id='d0'.* for question 0 .*expected a list of Hit"),
    ],
    ids=["gen-none", "gen-strings", "gen-text-none", "ret-none", "ret-none-per-q", "ret-docs"],
)  # fmt: skip
def test_malformed_backend_results_say_what_was_expected(backend, message):
    questions = [q(i, t) for i, t in enumerate(QUESTIONS)]
    rag = AdaptiveRAG(LengthRouter(), backend, backend, k=2)
    with pytest.raises(BackendError, match=message):
        rag.run(questions)


@pytest.mark.parametrize("steps", [0, 11, -1])
def test_step_limit_out_of_range_is_refused(steps, capsys):
    with pytest.raises(ConfigError, match="--max-steps must be 1 to 10"):
        MultiStepConfig(max_steps=steps).check()
    # before any engine starts: the CLI answers at once with exit code 2
    assert main(["rag", "--modes", "multi-step", "--max-steps", str(steps)]) == 2
    assert "--max-steps must be 1 to 10" in capsys.readouterr().err
    assert main(["label", "--policy", "strategies", "--max-steps", str(steps)]) == 2


def test_one_step_asks_for_the_answer_at_once():
    gen = ScriptedGenerator()
    run = multi(gen, BM25Retriever(DOCS), max_steps=1).run([q(1, "Who wrote Hamlet?")])
    assert gen.calls[0][0].endswith(ANSWER_MARKER) and run.answers[0].llm_calls == 1


def test_the_last_step_s_answer_keeps_its_initials():
    """The last step's reply to "So the answer is:" was cut at its first ". ": "J"."""
    gen = ScriptedGenerator({"Who wrote Harry Potter?": ["J. K. Rowling wrote it."]})
    run = multi(gen, BM25Retriever(DOCS), max_steps=1).run([q(1, "Who wrote Harry Potter?")])
    assert run.answers[0].answer == "J. K. Rowling wrote it"


def test_the_last_step_s_answer_is_its_whole_first_line():
    """Not its first sentence: "Bros." (no abbreviation the splitter knows) cut it short."""
    gen = ScriptedGenerator({"Who made it?": ["Hamlet is a play.", "Warner Bros. Pictures.\nQ:"]})
    run = multi(gen, BM25Retriever(DOCS), max_steps=2).run([q(1, "Who made it?")])
    assert run.answers[0].answer == "Warner Bros. Pictures"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("J. K. Rowling.", "J. K. Rowling"),
        ("A: Warner Bros. Pictures.\nQ: Who?", "Warner Bros. Pictures"),
        ("\nSt. Louis, Missouri\nmore", "St. Louis, Missouri"),
        ("Paris. So the answer is: So the answer is: So th", "Paris"),
        ("So the answer is: So the", ""),
    ],
)
def test_final_answer(text, expected):
    assert final_answer(text) == expected


def test_the_context_limit_drops_the_oldest_documents_then_fails_that_question_alone():
    long_question = "Why " + "really " * 200 + "?"
    questions = [q(1, "Who founded the Roman city of London where Hamlet was written?"),
                 q(2, long_question)]  # fmt: skip
    long_docs = [Document(d.id, d.title, (d.text + " ") * 4) for d in DOCS]  # ~40 words each
    gen = WindowedScripted(window=150, script={questions[0].text: ["London was founded."]})
    run = multi(gen, BM25Retriever(long_docs), k=3, max_docs=3, step_k=1).run(questions)
    a1, a2 = run.answers
    assert a1.error is None and a1.answer and a1.llm_calls == 2
    held = a1.steps[1]["documents"]
    assert 0 < len(held) < 3  # a window of 150 words holds fewer than the 3 documents,
    newest = BM25Retriever(long_docs).retrieve([Question("q", "London was founded.", (), "t")], 1)
    assert held[-1] == newest[0][0].document.id  # and the newest is kept
    assert max(gen.prompt_lengths([p for c in gen.calls for p in c])) <= 150 - 24
    assert "do not fit the generator's context window at step 1" in (a2.error or "")
    assert a2.llm_calls == 0 and run.costs.failed == 1


def test_a_failed_generator_call_fails_its_question_and_the_batch_goes_on():
    questions = [q(1, "Who founded the city where Hamlet was written?"),
                 q(2, "Where does the Seine flow through the capital?")]  # fmt: skip
    script = {questions[0].text: ["Hamlet was written in London."],
              questions[1].text: ["The Seine flows through Paris."]}  # fmt: skip
    gen = ScriptedGenerator(script, fail=[(questions[1].text, 2)])  # the server dies mid-step
    run = multi(gen, BM25Retriever(DOCS)).run(questions)
    ok, failed = run.answers
    assert ok.error is None and ok.answer == "written?" and ok.llm_calls == 2
    assert failed.retryable and "cannot reach the generator server" in failed.error
    assert run.costs.failed == 1 and run.costs.by_strategy["multi_step"].failed == 1
    everyone = ScriptedGenerator(script, fail=[(x.text, 1) for x in questions])
    with pytest.raises(BackendError, match="cannot reach"):  # all failed: the engine is down
        multi(everyone, BM25Retriever(DOCS)).run(questions)


@pytest.mark.parametrize(
    "kind", ["bm25", "contexts", pytest.param("dense", marks=pytest.mark.slow)]
)
def test_multi_step_works_with_every_retriever(kind):
    contexts = tuple({"title": d.title, "text": d.text} for d in DOCS[:3])
    question = q(1, "Who founded the city where Hamlet was written?", ("Romans",), contexts)
    if kind == "dense":  # (loads MiniLM: slow)
        from retrieval_gate.retrieval import DenseRetriever, MiniLMEncoder

        inner = DenseRetriever(DOCS, MiniLMEncoder())
    else:
        inner = BM25Retriever(DOCS) if kind == "bm25" else ContextRetriever()
    ret = Recording(inner)
    gen = ScriptedGenerator({question.text: ["Hamlet was written in London.", "So the answer "
                                             "is: the Romans."]})  # fmt: skip
    (a,) = multi(gen, ret, k=2, step_k=2).run([question]).answers
    assert ret.calls == [[question.text], ["Hamlet was written in London."]]
    assert a.answer == "the Romans" and a.match and a.retrievals == 2 and a.steps[0]["documents"]


def test_oracle_run_routes_to_the_cheapest_strategy_that_answered():
    qs = [q(i, f"Question {i}?", (str(i),)) for i in range(4)]
    gen = ScriptedGenerator()
    runs = {}
    for strategy in ("no_retrieval", "one_retrieval", "multi_step"):
        runs[strategy] = AdaptiveRAG(FixedStrategy(strategy), ContextRetriever(), gen).run(qs)
    right = {"no_retrieval": {"q0"}, "one_retrieval": {"q0", "q1"}, "multi_step": {"q2"}}
    for strategy, run in runs.items():
        for a in run.answers:
            a.match = a.id in right[strategy]
    oracle = oracle_from_run(runs["no_retrieval"], runs["one_retrieval"], runs["multi_step"])
    assert isinstance(oracle, OracleRouter)
    assert oracle.route(qs) == ["no_retrieval", "one_retrieval", "multi_step", "no_retrieval"]
    assert oracle.scores(qs).tolist() == [0.0, 1.0, 1.0, 0.0]


def test_costs_survive_a_saved_mode_and_the_table_has_the_new_columns():
    questions = [q(1, "Capital of France?"), q(2, "Who founded the city where Hamlet was written?")]
    gen = ScriptedGenerator({questions[1].text: ["Hamlet was written in London."]})
    run = AdaptiveRAG(LengthRouter(short=3, long=5), BM25Retriever(DOCS), gen).run(questions)
    result = ModeResult("router", "length-router", run)
    back = ModeResult.from_dict(result.to_dict())
    assert back.run.costs.by_strategy == run.costs.by_strategy
    assert back.run.answers[1].steps == run.answers[1].steps
    (row,) = comparison_rows([back])
    assert (row["retrievals/q"], row["LLM calls/q"]) == ("1.00", "1.50")  # (0 + 2) / 2, (1 + 2) / 2
    assert float(row["tok/s"]) > 0


def test_router_mode_flags_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="needs --router"):
        check_modes(["router"], ModeOptions())
    with pytest.raises(ConfigError, match="go with the router mode"):
        check_modes(["never"], ModeOptions(budget=1.0))
    with pytest.raises(DataError, match="no such folder"):
        check_modes(["router"], ModeOptions(router=tmp_path / "missing"))
    with pytest.raises(InputError, match="neither an export"):  # a folder, but no export
        check_modes(["router"], ModeOptions(router=tmp_path))
    (tmp_path / "model.onnx").write_bytes(b"")  # a model file, but no export's metadata
    with pytest.raises(DataError, match="gate_metadata.json: missing file; re-export"):
        check_modes(["router"], ModeOptions(router=tmp_path))
    router = {"strategies": ["no_retrieval", "one_retrieval"], "costs": [0.0, 1.0],
              "dev": {"price": [0.0], "mean_cost": [1.0], "shares": [[0.5, 0.5]]},
              "default_budget": 1.0, "default_price": 0.0, "objective": "budget-accuracy"}  # fmt: skip
    meta = {"task": "strategies", "router": router}
    (tmp_path / "gate_metadata.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match="int8"):  # an export without the int8 file asked for
        check_modes(["router"], ModeOptions(router=tmp_path, router_variant="int8"))
    router = LengthRouter()
    gates = build_mode_gates(["multi-step", "router"], None, ModeOptions(router=router))
    assert gates["router"] is router and gates["multi-step"].route(["a?"]) == ["multi_step"]
    with pytest.raises(ConfigError, match="binary gate"):
        build_mode_gates(["router"], None, ModeOptions(router=OracleGate({}), budget=1.0))


@pytest.mark.parametrize(
    "flags, message",
    [
        (["rag", "--modes", "router"], "needs --router DIR"),
        (["rag", "--modes", "never", "--budget", "1"], "go with the router mode"),
        # it was left unused
        (["rag", "--modes", "never", "--router-variant", "int8"], "--router-variant go with"),
        (["serve", "--gate", "onnx", "--router", "x"], "not both"),
        (["serve", "--budget", "1"], "--budget goes with --router"),
        (
            ["label", "--policy", "strategies", "--strategies", "no_retrieval", "web_search"],
            "unknown strategy 'web_search'",
        ),
        (
            ["label", "--policy", "strategies", "--strategies", "multi_step", "no_retrieval"],
            "cost order",
        ),
        (["label", "--policy", "strategies", "--engine", "ray"], "--engine ray does not go"),
    ],
)
def test_bad_flags_exit_2_before_any_engine(flags, message, capsys):
    assert main(flags) == 2
    assert message in capsys.readouterr().err


# ------------------------------------------------------------------ the real engine


def test_real_modes_multi_step_router_and_three_way_oracle(vllm_generator):
    """`rag --modes never always multi-step router oracle-run` on the real vLLM engine."""
    report = run_comparison(
        ["never", "always", "multi-step", "router", "oracle-run"],
        Sample(["retrievalqa"], limit=2, seed=4, with_contexts=True),
        Pipeline("contexts", k=1, max_new_tokens=8, multi_step=MultiStepConfig(max_steps=2)),
        mode_options=ModeOptions(router=LengthRouter(short=9, long=12)),
        generator=vllm_generator,
    )
    modes = report["modes"]
    multi = modes["multi-step"]["costs"]
    assert 1 <= multi["llm_calls"] / multi["questions"] <= 2  # at most max_steps LLM calls
    assert multi["retrievals"] == multi["llm_calls"] and multi["generation_calls"] <= 2
    assert multi["tokens_per_second"] > 0 and multi["by_strategy"]["multi_step"]["questions"] == 2
    answers = modes["multi-step"]["answers"]
    assert all(a["answer"] or a["error"] for a in answers) and all(a["steps"] for a in answers)
    assert all(a["prompt_tokens"] > 0 for a in answers)
    routed = {a["strategy"] for a in modes["router"]["answers"]}
    assert routed <= {"no_retrieval", "one_retrieval", "multi_step"}
    oracle = {a["id"]: a["strategy"] for a in modes["oracle-run"]["answers"]}
    for i, s in oracle.items():  # the cheapest strategy whose answer matched in this run
        right = [m for m in ("never", "always", "multi-step")
                 if next(a for a in modes[m]["answers"] if a["id"] == i)["match"]]  # fmt: skip
        cheapest = {"never": "no_retrieval", "always": "one_retrieval",
                    "multi-step": "multi_step"}.get(right[0] if right else "never")  # fmt: skip
        assert s == cheapest
    row = next(r for r in report["table"] if r["mode"] == "multi-step")
    assert {"retrievals/q", "LLM calls/q", "tok/s"} <= set(row)
    assert "max_steps=2" in report["note"]
    assert np.isfinite(float(row["tok/s"]))


def test_strategy_costs_are_the_routers_own_else_the_defaults():
    assert strategy_costs(LengthRouter()) == DEFAULT_COSTS  # a router that states none
    binary = OracleGate({"q1": 1})
    assert strategy_costs(binary) == {"no_retrieval": 0.0, "one_retrieval": 1.0}
    own = {"no_retrieval": 0.0, "one_retrieval": 2.0, "multi_step": 5}
    assert strategy_costs(LengthRouter(costs=own)) == {**own, "multi_step": 5.0}
    two = LengthRouter(strategies=("no_retrieval", "one_retrieval"), costs=own)
    two.costs = {"no_retrieval": 0.0, "one_retrieval": 2.0}
    assert strategy_costs(two) == two.costs
    for bad in ({"no_retrieval": 0.0, "one_retrieval": 2.0}, {**own, "multi_step": float("nan")},
                {**own, "one_retrieval": -1.0}):  # fmt: skip
        router = LengthRouter()
        router.costs = bad
        with pytest.raises(ConfigError, match="length-router.*costs"):
            strategy_costs(router)
