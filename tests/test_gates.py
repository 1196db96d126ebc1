"""Baseline gates: popularity thresholds vs brute force, TA-ARE prompt assembly, confidence,
TF-IDF, the registry."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from retrieval_gate.errors import DataError
from retrieval_gate.gates.base import Gate, decide
from retrieval_gate.gates.confidence import ConfidenceGate, confidence_score
from retrieval_gate.gates.popularity import best_cut, fit_popularity, mallen_protocol
from retrieval_gate.gates.prompt import DemoPool, PromptGate, ta_are_prompt
from retrieval_gate.gates.registry import GateContext, LazyGenerator, build_gate, gate_names
from retrieval_gate.gates.tfidf import TfidfGate
from retrieval_gate.generation.base import Generation
from retrieval_gate.generation.prompts import TA_ARE_NO_DEMOS
from retrieval_gate.labels.evalset import EvalSet
from retrieval_gate.labels.scoring import judge
from retrieval_gate.questions import Question

RNG = np.random.default_rng(3)


def q(i, text=None, s_pop=None, relation=None, source="popqa"):
    return Question(
        f"q{i}", text or f"question {i}?", ("a",), source, s_pop=s_pop, relation=relation
    )


def brute_force(s_pop, if_r, if_k):
    """Every threshold from the data's own values (and beyond): the reference optimum."""
    best = -1.0
    for t in [*np.unique(s_pop), np.max(s_pop) + 1]:
        best = max(best, float(if_r[s_pop < t].sum() + if_k[s_pop >= t].sum()))
    return best


@pytest.mark.parametrize("seed", range(20))
def test_best_cut_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = rng.integers(1, 40)
    s_pop = rng.integers(0, 15, n).astype(float)  # small range: many ties
    if_r, if_k = rng.integers(0, 2, n).astype(float), rng.integers(0, 2, n).astype(float)
    t = best_cut(s_pop, if_r, if_k)
    got = if_r[s_pop < t].sum() + if_k[s_pop >= t].sum()
    assert got == brute_force(s_pop, if_r, if_k)


def test_per_relation_fit_and_score_semantics():
    # relation A: retrieval pays below 100 views; relation B: it never pays
    qs, closed, rag = [], [], []
    for i, pop in enumerate([5, 50, 90, 200, 500, 1000] * 2):
        rel = "A" if i < 6 else "B"
        qs.append(q(i, s_pop=pop, relation=rel))
        closed.append(float(pop >= 100 or rel == "B"))
        rag.append(float(rel == "A" and pop < 100))
    qs.append(q(99, source="triviaqa"))  # no s_pop: falls back to the label base rate
    closed, rag = np.array([*closed, np.nan]), np.array([*rag, np.nan])
    y = np.array([int(r > c) for r, c in zip(rag[:-1], closed[:-1], strict=True)] + [1])
    gate = fit_popularity(qs, y, closed, rag, min_per_relation=3)
    assert 90 < gate.relation_thresholds["A"] < 200
    assert gate.relation_thresholds["B"] < 5
    d = decide(gate, qs)
    assert d[:3].all() and not d[3:12].any()
    assert gate.scores(qs)[-1] == 1.0 and d[-1]  # the only no-s_pop question needed retrieval
    # per-relation brute force reaches the total optimum: every question right
    assert np.mean(np.where(d[:-1], rag[:-1], closed[:-1])) == 1.0


def test_popularity_gate_keeps_a_question_exactly_at_its_cut_as_best_cut_does():
    """best_cut's rule retrieves iff s_pop < cut; a question at the cut scored exactly 0.5 and
    the threshold 0.5 retrieved it. Below and above the cut, and the order, are unchanged."""
    from retrieval_gate.gates.popularity import PopularityGate

    for log_scale in (True, False):
        gate = PopularityGate({"A": 100.0}, 10.0, 0.5, log_scale=log_scale)
        qs = [q(0, s_pop=99.0, relation="A"), q(1, s_pop=100.0, relation="A"),
              q(2, s_pop=101.0, relation="A"), q(3, s_pop=10.0, relation="Z")]  # fmt: skip
        s = gate.scores(qs)
        assert list(s >= gate.threshold) == [True, False, False, False]
        assert s[0] > s[1] > s[2] and s[1] == pytest.approx(0.5)


def test_global_threshold_is_brute_force_optimal_across_relations():
    qs = [
        q(i, s_pop=int(p), relation=r)
        for i, (p, r) in enumerate(zip(RNG.integers(0, 50, 60), itertools.cycle("XYZ")))
    ]
    closed, rag = RNG.integers(0, 2, 60).astype(float), RNG.integers(0, 2, 60).astype(float)
    y = (rag > closed).astype(int)
    gate = fit_popularity(qs, y, closed, rag, per_relation=False)
    d = decide(gate, qs)
    pops = np.array([x.s_pop for x in qs], float)
    assert np.where(d, rag, closed).sum() == brute_force(pops, rag, closed)


def test_mallen_protocol_averages_held_out_splits():
    qs = [q(i, s_pop=int(p), relation="A") for i, p in enumerate(RNG.integers(0, 1000, 80))]
    pops = np.array([x.s_pop for x in qs])
    closed, rag = (pops >= 300).astype(float), (pops < 300).astype(float)
    out = mallen_protocol(qs, (rag > closed).astype(int), closed, rag, n_splits=10)
    assert out["n_splits"] == 10 and out["adaptive_accuracy_mean"] > 0.95
    assert out["adaptive_accuracy_mean"] > max(
        out["closed_book_accuracy"], out["always_retrieve_accuracy"]
    )


def test_ta_are_prompt_assembly_order():
    """The authors' layout: [No] and [Yes] alternating, a [No] first; the nearest last."""
    p = ta_are_prompt("Who is X?", "2026-11-22", ["Near one?", "Near two?"])
    assert p.startswith("Today is 2026-11-22. Given a question, determine whether")
    positions = [p.index(s) for s in ("Here are some examples:", f"{TA_ARE_NO_DEMOS[0]}\nAnswer: [No].",
                 "Near two?\nAnswer: [Yes].", f"{TA_ARE_NO_DEMOS[1]}\nAnswer: [No].",
                 "Near one?\nAnswer: [Yes].", "Question: Who is X?\nAnswer:")]  # fmt: skip
    assert positions == sorted(positions)
    assert p.endswith("Question: Who is X?\nAnswer:") and p.count("[Yes]") == 3  # 2 + instruction
    # every question's prompt starts with the same head up to the first [Yes] demonstration
    other = ta_are_prompt("Who is Y?", "2026-11-22", ["Far?", "Farther?"])
    head = p[: p.index("Near two?")]
    assert other.startswith(head) and head.endswith("Answer: [No].\n\nQuestion: ")


class VocabEmbed:
    vocab = ["capital", "born", "river", "actor", "city", "where", "who", "what"]

    def __call__(self, texts):
        v = np.array([[t.lower().count(w) for w in self.vocab] for t in texts], float) + 1e-6
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_ta_are_demos_are_nearest_long_tail_questions_the_generator_got_wrong():
    train = [
        q(1, "Where was the actor born?", s_pop=10),
        q(2, "Which river is in the city?", s_pop=20),
        q(3, "Where was the actor born in the city?", s_pop=30),
        q(4, "Where was the actor born, again?", s_pop=5000),  # popular: not long tail
        q(5, "Where was the other actor born?", s_pop=40),  # answered right: not a demo
        q(6, "What river flows by the capital?", source="triviaqa"),
    ]
    records = {f"q{i}": {"match": i == 5} for i in range(1, 7)}
    pool = DemoPool.from_closed_book(train, records, VocabEmbed())
    assert [x.id for x in pool.questions] == ["q1", "q2", "q3", "q6"]
    gate = PromptGate(lambda: None, "ta-are", pool, date="2024-01-31")
    asked = [q(10, "Where was this actor born?"), q(1, "Where was the actor born?", s_pop=10)]
    prompts = gate.prompts(asked)
    assert "Where was the actor born?\nAnswer: [Yes]" in prompts[0]
    assert "born in the city?\nAnswer: [Yes]" in prompts[0]
    assert "river" not in prompts[0].split("Here are some examples:")[1].split("[No]")[0]
    # a training question is never its own demonstration
    assert prompts[1].count("Where was the actor born?") == 1


class FakeGenerator:
    """A stand-in generator for prompt routing only (the real engine is tested below)."""

    name, checksum = "fake", "0"

    def __init__(self):
        self.calls = []

    def choice_probs(self, prompts, choices):
        self.calls.append((list(prompts), list(choices)))
        return np.array([[0.25, 0.75]] * len(prompts))


def test_prompt_gate_batches_all_prompts_in_one_call_and_returns_p_yes():
    gen = FakeGenerator()
    gate = PromptGate(lambda: gen, "vanilla")
    s = gate.scores([q(1), q(2), q(3)])
    assert len(gen.calls) == 1 and gen.calls[0][1] == ["[Yes]", "[No]"]
    assert len(gen.calls[0][0]) == 3 and np.allclose(s, 0.25)


def test_llm_gates_are_keyed_by_what_their_scores_depend_on():
    """Cached scores (evaluate's, tune's) are found by `checksum`: another generator's
    weights, TA-ARE date, demonstration pool or set of recorded answers is another key; the
    same inputs are the same key."""
    texts = ["Where was the actor born?", "Which river is in the city?", "Who is the actor?"]
    train = [q(i, t, s_pop=10) for i, t in enumerate(texts)]
    gen_a, gen_b = FakeGenerator(), FakeGenerator()
    gen_b.checksum = "1"

    def key(gen, **kw):
        return PromptGate(lambda: gen, **kw).checksum

    ta = {"template": "ta-are", "demos": DemoPool(train, VocabEmbed()), "date": "2024-01-31"}
    assert key(gen_a) == key(gen_a) != key(gen_b)
    assert key(gen_a, **ta) not in (key(gen_a), key(gen_b, **ta))
    assert key(gen_a, **ta) != key(gen_a, **{**ta, "date": "2025-01-31"})
    assert key(gen_a, **ta) != key(gen_a, **{**ta, "demos": DemoPool(train, VocabEmbed(), k=1)})
    assert key(gen_a, **ta) == key(gen_a, **{**ta, "demos": DemoPool(train, VocabEmbed())})
    # a new prompt version is a new key (v1 TA-ARE scores are not reused for v2)
    before = (key(gen_a), key(gen_a, **ta))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("retrieval_gate.gates.prompt.TA_ARE_ID", "retrievalqa-ta-are-v0")
        mp.setattr("retrieval_gate.gates.prompt.VANILLA_ID", "retrievalqa-vanilla-v0")
        assert key(gen_a) != before[0] and key(gen_a, **ta) != before[1]

    def confidence(gen, records):
        return ConfidenceGate(records, lambda: gen).checksum

    assert confidence(gen_a, {"q1": {"match": True}}) != confidence(gen_a, {"q1": {"match": False}})
    assert confidence(gen_a, {}) != confidence(gen_b, {})
    assert gen_a.calls == []  # keys never run the generator


_EMPTY_SAFETENSORS = (2).to_bytes(8, "little") + b"{}"  # a header of no tensors


def test_lazy_generator_knows_its_checksum_without_starting_the_engine(tmp_path):
    from retrieval_gate.generation.model_folders import weights_checksum

    # a marker's recorded value is not trusted (a copied folder's weights may be others)
    (tmp_path / "prepared.json").write_text('{"weights_sha256": "abc"}')
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')  # a model folder's files
    (tmp_path / "model.safetensors").write_bytes(_EMPTY_SAFETENSORS)
    lazy = LazyGenerator(name_or_path=str(tmp_path))
    assert lazy.checksum == weights_checksum(tmp_path) and lazy._generator is None
    assert LazyGenerator(name_or_path="org/some-model").checksum == "org/some-model"
    running = GateContext(_generator=FakeGenerator()).generator
    assert running.checksum == "0"


class NamedEncoder(VocabEmbed):
    """As `MiniLMEncoder` to DemoPool: a bound `encode` whose owner names its model."""

    def __init__(self, model_name="vocab-v1"):
        self.model_name, self.calls = model_name, 0

    def encode(self, texts):
        self.calls += 1
        return self(texts)


def test_ta_are_pool_embeddings_are_kept_by_encoder_and_texts(tmp_path, monkeypatch):
    """Each stage building TA-ARE embeds the same pool: a named encoder's vectors are kept on
    disk and found again by model and texts; another model or another pool is encoded."""
    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path))
    pool = [q(3, "Who was the director of Xyz?"), q(4, "Who is the father of Abc?"),
            q(5, "What genre is Q?")]  # fmt: skip
    first = NamedEncoder()
    a = DemoPool(pool, first.encode)
    again = NamedEncoder()
    b = DemoPool(pool, again.encode)
    assert (first.calls, again.calls) == (1, 0) and np.array_equal(a.vectors, b.vectors)
    other = NamedEncoder("vocab-v2")
    DemoPool(pool, other.encode)
    more = NamedEncoder()
    DemoPool([*pool, q(6, "Where is the river?")], more.encode)
    assert other.calls == more.calls == 1
    assert len(list((tmp_path / "embeddings").glob("*.npz"))) == 3
    unnamed = DemoPool(pool, VocabEmbed())  # a plain function: nothing kept
    assert np.allclose(unnamed.vectors, a.vectors)
    assert len(list((tmp_path / "embeddings").glob("*.npz"))) == 3
    folder = tmp_path / "encoder"  # a local model folder: its weights are part of the key
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights one")
    encoders = [NamedEncoder(str(folder)) for _ in range(3)]
    DemoPool(pool, encoders[0].encode)
    DemoPool(pool, encoders[1].encode)
    (folder / "model.safetensors").write_bytes(b"other weights, same path")
    DemoPool(pool, encoders[2].encode)
    assert [e.calls for e in encoders] == [1, 0, 1]
    for kept in (tmp_path / "embeddings").glob("*.npz"):
        kept.write_bytes(b"not an array")  # damaged: computed again, never read as vectors
    again = NamedEncoder()
    assert np.array_equal(DemoPool(pool, again.encode).vectors, a.vectors) and again.calls == 1


def test_prompt_gates_with_the_real_engine(vllm_generator):
    gate = PromptGate(lambda: vllm_generator, "vanilla")
    qs = [q(1, "What is the capital of France?"), q(2, "What is today's weather in Tokyo?")]
    s = gate.scores(qs)
    assert s.shape == (2,) and np.all((s > 0) & (s < 1))
    pool = DemoPool(
        [
            q(3, "Who was the director of Xyz?"),
            q(4, "Who is the father of Abc?"),
            q(5, "What genre is Q?"),
        ],
        VocabEmbed(),
    )
    ta = PromptGate(lambda: vllm_generator, "ta-are", pool, date="2026-11-22").scores(qs)
    assert ta.shape == (2,) and np.all((ta > 0) & (ta < 1))


def test_confidence_score_works_in_probabilities():
    assert confidence_score(0.0, False) == 0.0  # certain answer: no retrieval
    assert confidence_score(np.log(0.2), False) == pytest.approx(0.8)
    assert confidence_score(-0.1, True) == 1.0  # "I don't know" always retrieves
    # lower log-probability -> higher need (the inversion of AkariAsai/self-rag#45 cannot happen)
    assert confidence_score(-3.0, False) > confidence_score(-0.5, False)
    gate = ConfidenceGate({"q1": {"mean_logprob": -2.0, "idk": False}})
    assert gate.scores([q(1)])[0] == pytest.approx(1 - np.exp(-2.0))
    with pytest.raises(DataError, match="no closed-book record"):
        gate.scores([q(2)])


class _Answers:
    """A generator that returns fixed closed-book answers (the rule under test is the gate's)."""

    name, checksum = "fixed", "-"

    def __init__(self, texts):
        self.texts = texts

    def generate(self, prompts, max_new_tokens=24, logprobs=False):
        return [Generation(t, 10, 3, [-0.01] * 3) for t in self.texts[: len(prompts)]]


def test_confidence_gate_uses_the_label_files_idk_rule():
    """A fresh answer and a recorded one are judged declined by the same rule (labels' `idk`)."""
    answers = ["I'm sorry, I cannot answer that.", "Unable to determine.", "Paris"]
    gate = ConfidenceGate(generator=lambda: _Answers(answers))
    fresh = gate.scores([q(i) for i in range(3)])
    recorded = [judge(a, q(i), {})["idk"] for i, a in enumerate(answers)]
    assert recorded == [True, True, False]
    assert list(fresh[:2]) == [1.0, 1.0] and fresh[2] < 0.1


def test_length_gate_follows_the_word_count_the_labels_reward():
    from retrieval_gate.errors import MissingInputError
    from retrieval_gate.gates.length import LengthGate

    short = [q(i, "who is " + "x" * (i + 1) + "?") for i in range(20)]  # 3 words, retrieve
    long = [q(20 + i, " ".join(["word"] * (8 + i % 5)) + "?") for i in range(20)]  # 8-12 words
    gate = LengthGate.fit(short + long, np.array([1] * 20 + [0] * 20))
    s = gate.scores(["Who wrote it?", "which of the two films shot in the region came out first?"])
    assert s[0] > 0.5 > s[1]  # strings, as every gate takes them
    flipped = LengthGate.fit(short + long, np.array([0] * 20 + [1] * 20))
    assert flipped.scores(["Who wrote it?"])[0] < 0.5
    with pytest.raises(MissingInputError, match="only one label"):
        LengthGate.fit(short, np.ones(20))


def test_tfidf_gate_learns_words():
    texts = [f"what is the weather today in city {i}" for i in range(20)] + [
        f"who wrote the famous book number {i}" for i in range(20)
    ]
    qs = [q(i, t) for i, t in enumerate(texts)]
    y = np.array([1] * 20 + [0] * 20)
    gate = TfidfGate.fit(qs, y)
    s = gate.scores(
        [q(100, "what is the weather today in city 99"), q(101, "who wrote the famous book")]
    )
    assert s[0] > 0.5 > s[1]


def test_registry_ta_are_picks_demos_with_the_retrievers_minilm():
    """The TA-ARE gate's demonstrations come from the same MiniLM encoder dense retrieval uses."""
    texts = ["Who directed the film Blue Harbour?", "What sport does Ann Lee play?",
             "In what country is Vell?", "Who is the father of Kip?"]  # fmt: skip
    train = [q(i, t, s_pop=10) for i, t in enumerate(texts)]
    evalset = EvalSet(tuple(train), np.ones(4, int), np.zeros(4), np.ones(4))
    records = {x.id: {"match": False} for x in train}
    gate = build_gate("prompt-ta-are", GateContext(train=evalset, closed_book=records))
    prompt = gate.prompts([q(9, "Who was the director of the movie Blue Harbour?")])[0]
    last_demo = prompt.split("Here are some examples:\n\n")[1].split("\n\n")[3]
    assert last_demo == f"Question: {texts[0]}\nAnswer: [Yes]."  # the nearest, next to the question


def test_registry_builds_gates_and_names_missing_data():
    assert {"always", "never", "popularity", "prompt-vanilla", "prompt-ta-are", "confidence",
            "tfidf", "learned", "onnx"} <= set(gate_names())  # fmt: skip
    for name in ("always", "never"):
        assert isinstance(build_gate(name), Gate)
    with pytest.raises(DataError, match="tfidf.*train"):
        build_gate("tfidf", GateContext())
    with pytest.raises(DataError, match="unknown gate"):
        build_gate("nope")
    with pytest.raises(DataError, match="--learned-run"):
        build_gate("learned", GateContext())


def test_features_are_read_by_position_from_a_data_frame_or_its_columns():
    """A pandas Series indexed by its labels (a sorted or filtered frame) was read at labels
    0, 1, ...: its values went to other questions (here swapped), silently; a DataFrame was
    refused with dict()'s own ValueError."""
    import pandas as pd

    from retrieval_gate.errors import InputError
    from retrieval_gate.gates.base import as_questions

    frame = pd.DataFrame({"q": ["Capital of Bhutan?", "Who wrote Hamlet?"], "views": [None, 9.0]})
    frame = frame.iloc[[1, 0]]  # sorted: its index is [1, 0]
    want = [{"views": 9.0}, {"views": None}]
    for features in ({"views": frame.views}, frame[["views"]], {"views": [9.0, None]}):
        got = [{k: (None if v != v else v) for k, v in q.extra.items()}  # NaN: pandas' None
               for q in as_questions(list(frame.q), features)]  # fmt: skip
        assert got == want, type(features)
    with pytest.raises(InputError, match="features: a row is 'a'; give one mapping per question"):
        as_questions(["a?", "b?"], ["a", "b"])
    with pytest.raises(InputError, match="feature 'views' has 1 values for 2 questions"):
        as_questions(["a?", "b?"], {"views": frame.views[:1]})
    # a value alone was a TypeError, text was read as one character a question ("500": 5, 0)
    assert as_questions("a?", {"views": 100000})[0].extra == {"views": 100000}  # one question
    for features, message in [
        ({"views": 5}, "feature 'views' is 5: give a list of values"),
        ({"views": "50"}, "feature 'views' is '50': give a list"),
        (5, r"features is 5: give a mapping of columns \({name: values}\)"),
    ]:
        with pytest.raises(InputError, match=message):
            as_questions(["a?", "b?"], features)


def word_gate(max_length: int):
    """An `EncoderGate` over a real `tokenizers` tokenizer (word level, truncating at
    max_length, as `OnnxGate`'s), its score a function of the ids it read in order; `seen`:
    the longest text each `encode` was given."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from retrieval_gate.gates.encoder import EncoderGate

    class WordGate(EncoderGate):
        name, threshold, batch_size, pad_id, side_features = "words", 0.5, 64, 0, None
        device = "CPUExecutionProvider"

        def encode(self, texts):
            self.seen.append(max(len(t) for t in texts))
            return [e.ids for e in self.tokenizer.encode_batch(list(texts))]

        def run_batch(self, input_ids, mask, features):
            weights = np.arange(1, input_ids.shape[1] + 1)
            return ((input_ids * mask * weights).sum(1) % 997 / 997).astype(np.float32)

    vocab = {w: i for i, w in enumerate(["[UNK]", "who", "wrote", "hamlet", "?", "the"], 1)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.enable_truncation(max_length)
    gate = WordGate()
    gate.tokenizer, gate.max_length, gate.seen = tok, max_length, []
    return gate


def test_encoder_gates_cut_a_huge_text_before_tokenising_it():
    """The whole text was tokenised before truncation to max_length: a 10 MB line took 17 s
    and 2 GB, tens of MB killed the process. Now each text is cut to max_length x
    CHARS_PER_TOKEN characters first; the scores of every other text are as they were."""
    from retrieval_gate.gates.encoder import CHARS_PER_TOKEN, pad_right

    gate = word_gate(max_length=16)
    bound = 16 * CHARS_PER_TOKEN
    normal = ["who wrote hamlet ?", "the the who", "x " * 40 + "hamlet", " " * (bound - 7) + "who"]
    whole = [e.ids for e in gate.tokenizer.encode_batch(normal)]  # tokenised whole, as before
    before = [gate.run_batch(*pad_right([ids], 0), None)[0] for ids in whole]
    np.testing.assert_array_equal(gate.score_texts(normal), np.float32(before))
    huge = "who wrote hamlet ? " * 60_000  # 1.1 MB on one line
    start = time.monotonic()
    scores = gate.score_texts([huge, "who wrote hamlet ?"])
    assert gate.seen[-1] <= bound  # the tokenizer never read the whole megabyte
    assert time.monotonic() - start < 1.0
    assert scores[0] == gate.score_texts([huge[:200]])[0]  # its first 16 tokens, as before


def test_a_question_padded_with_whitespace_past_the_cut_keeps_its_words():
    """The cut counted whitespace: 800 spaces before a question (or inside it) left only
    spaces within max_length x CHARS_PER_TOKEN characters, scored as an empty question with no
    error. Now a text past the bound has its whitespace runs squeezed first: it scores as the
    question does."""
    from retrieval_gate.gates.encoder import CHARS_PER_TOKEN

    gate = word_gate(max_length=16)
    pad = " " * (16 * CHARS_PER_TOKEN + 100)
    question = "who wrote hamlet ?"
    padded = [pad + question, "who wrote" + pad + "hamlet ?", question + "\n" * 900]
    np.testing.assert_array_equal(gate.score_texts(padded), gate.score_texts([question] * 3))
    assert gate.clip(padded)[0] == " " + question


def test_pandas_and_numpy_missing_markers_are_unknown_feature_values():
    """pd.NA (a nullable Int64 / Float64 / string column's missing cell) was a raw TypeError,
    "boolean value of NA is ambiguous", where None and NaN are read as unknown; pd.NaT was
    refused as not a number, numpy's masked element read as NaN with a warning."""
    import warnings

    import pandas as pd

    from retrieval_gate.gates.base import as_questions
    from retrieval_gate.questions import feature_value

    texts = ["a?", "b?", "c?"]
    columns = [
        pd.DataFrame({"hits": pd.array([1, None, 3], dtype="Int64")}),
        {"hits": pd.array([1.0, None, 3.0], dtype="Float64")},
        {"hits": pd.Series([1, pd.NA, 3], dtype="object")},
        {"hits": [1, pd.NaT, 3]},
        {"hits": np.ma.array([1.0, 2.0, 3.0], mask=[False, True, False])},
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "converting a masked element to nan"
        for features in columns:
            got = [feature_value(q, "hits") for q in as_questions(texts, features)]
            assert got == [1.0, None, 3.0], features
