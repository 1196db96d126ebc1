"""Answer log-probabilities as data (issue 37): outcomes files carry them (`token_logprobs`,
`mean_logprob`), labelling runs record them, label files keep them, and `labels.logprobs`
reads them back and turns them into a two-stage gate's features."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from retrieval_gate.cli import main
from retrieval_gate.errors import DataError
from retrieval_gate.generation.base import Generation
from retrieval_gate.labels.label_files import LabelFile
from retrieval_gate.labels.labelling_run import LabellingRun
from retrieval_gate.labels.logprobs import (
    FEATURES,
    AnswerLogprobs,
    answer_logprobs,
    feature_matrix,
    logprob_features,
    parse_token_logprobs,
)
from retrieval_gate.questions import Question
from user_files import QUESTIONS, write_jsonl


def _label(tmp_path: Path, outcomes: Path) -> int:
    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    return main(["label", "--policy", "outcomes", "--outcomes", str(outcomes), "--questions",
                 str(qs), "--generator", "my-llm", "--labels-dir", str(tmp_path / "labels")])  # fmt: skip


def _closed(tmp_path: Path) -> Path:
    return tmp_path / "labels" / "my-llm" / "closed-book.jsonl"


def test_csv_token_logprobs_and_mean_are_kept_and_read_back(tmp_path):
    path = tmp_path / "outcomes.csv"
    path.write_text(
        "id,prediction,token_logprobs,mean_logprob\n"
        'm1,William Shakespeare,"[-0.1, 0.0, -0.2]",\n'  # a JSON list in a CSV cell; 0.0 valid
        "m2,Lyon,,-1.5\n"  # the mean only
        "m3,Quen Vik,,\n"  # neither
    )
    assert _label(tmp_path, path) == 0
    rows = LabelFile(_closed(tmp_path)).rows  # a round trip through the file
    assert rows["m1"]["token_logprobs"] == [-0.1, 0.0, -0.2]
    assert rows["m1"]["mean_logprob"] == pytest.approx(-0.1)
    assert rows["m2"]["mean_logprob"] == -1.5 and "token_logprobs" not in rows["m2"]
    assert rows["m3"]["mean_logprob"] is None and rows["m1"]["label"] == 0
    got = answer_logprobs(_closed(tmp_path))
    assert got == LabellingRun(_closed(tmp_path).parent).answer_logprobs()
    assert got["m1"].token_logprobs == (-0.1, 0.0, -0.2)
    assert got["m2"] == AnswerLogprobs(None, -1.5) and "m3" not in got


def test_jsonl_lists_correctness_rows_and_lm_eval_samples(tmp_path):
    rows = [{"id": "m1", "correct": True, "token_logprobs": [0.0, -0.5]},
            {"id": "m2", "correct": False, "mean_logprob": "-2.25"},
            {"id": "m3", "prediction": "Quen Vik", "token_logprobs": "[-0.3]"}]  # fmt: skip
    assert _label(tmp_path, write_jsonl(tmp_path / "out.jsonl", rows)) == 0
    got = answer_logprobs(_closed(tmp_path))
    assert got["m1"] == AnswerLogprobs((0.0, -0.5), -0.25)
    assert got["m2"] == AnswerLogprobs(None, -2.25) and got["m3"].token_logprobs == (-0.3,)
    # lm-evaluation-harness samples carry them as top-level keys of the row
    samples = [{"doc": d, "filtered_resps": [a], "resps": [[a]], "token_logprobs": lp}
               for d, a, lp in zip(QUESTIONS, ["Shakespeare", "Paris", "no idea"],
                                   [[-0.01, -0.02], [-0.3], [-4.0, -3.0]], strict=True)]  # fmt: skip
    lm = tmp_path / "lm"
    lm.mkdir()
    assert _label(lm, write_jsonl(lm / "samples_qa_2026.jsonl", samples)) == 0
    assert answer_logprobs(_closed(lm))["m3"] == AnswerLogprobs((-4.0, -3.0), -3.5)


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        ('"[-0.2, 0.1]",', "column 'token_logprobs', token 2: is 0.1, above 0"),
        (",0.1", "column 'mean_logprob': is 0.1, above 0"),
        ('"[-0.2, NaN]",', "column 'token_logprobs', token 2: is nan"),
        ('"[-Infinity]",', "column 'token_logprobs', token 1: is -inf"),
        # two of these made the mean -inf, written into the label file as -Infinity
        ('"[-1e308, -1e308]",', "column 'token_logprobs', token 1: is -1e+308, below -100000"),
        (",-3.4e38", "column 'mean_logprob': is -3.4e+38, below -100000"),
        ('"[-0.2, ""x""]",', "column 'token_logprobs', token 2: 'x' is not a number"),
        ("-0.5,", "column 'token_logprobs': -0.5 is not a list"),
        ("oops,", "column 'token_logprobs': 'oops' is not a JSON list"),
        ("[],", "column 'token_logprobs' is an empty list, but the row has an answer"),
        (",abc", "column 'mean_logprob': 'abc' is not a number"),
    ],
)
def test_bad_logprobs_are_refused_naming_file_row_and_column(tmp_path, capsys, cells, message):
    path = tmp_path / "outcomes.csv"
    path.write_text(f"id,prediction,token_logprobs,mean_logprob\nm1,Paris,,\nm2,Lyon,{cells}\n")
    assert _label(tmp_path, path) == 2
    err = capsys.readouterr().err
    assert f"{path}, line 3:" in err and message in err, err
    assert not _closed(tmp_path).exists()


def test_parse_accepts_zero_and_refuses_above_zero():
    assert parse_token_logprobs("[0.0, -0, 0]") == [0.0, 0.0, 0.0]
    assert parse_token_logprobs(np.array([-1.0])) == [-1.0]  # a Parquet list cell
    assert parse_token_logprobs(None) is None and parse_token_logprobs(" ") is None
    with pytest.raises(DataError, match=r"f\.csv, line 7: column 'lp', token 1: is 0\.1"):
        parse_token_logprobs([0.1], "f.csv", 7, "lp")
    with pytest.raises(DataError, match="not a number"):
        parse_token_logprobs([True])


def test_a_list_cell_as_pandas_writes_one_reads_as_the_list(tmp_path):
    """`DataFrame.to_csv` writes a list column as Python's repr (['a', 'b']) and a numpy array
    column without commas ([-0.1  -0.25]); both were refused as "not a JSON list"."""
    import pandas as pd

    from retrieval_gate.data.list_cells import list_cell

    assert parse_token_logprobs("[-0.1  -0.25]") == [-0.1, -0.25]
    assert parse_token_logprobs("[-1.0e-05\n -3.5e+00]") == [-1e-05, -3.5]  # numpy wraps lines
    assert parse_token_logprobs("(-0.5, -1.0)") == [-0.5, -1.0]
    frame = pd.DataFrame({"lp": [np.array([-0.1, -0.25]), [-0.3]], "a": [["O'Brien", "x"], []]})
    frame.to_csv(tmp_path / "f.csv", index=False)
    back = pd.read_csv(tmp_path / "f.csv")
    assert [parse_token_logprobs(c) for c in back.lp] == [[-0.1, -0.25], [-0.3]]
    assert [list_cell(c) for c in back.a] == [["O'Brien", "x"], []]
    for bad in ("[-0.1 ... -0.3]", "[__import__('os')]", "[nan]", "{'a': 1}", "[1, 2"):
        assert list_cell(bad) is None, bad  # numpy's elision, a call, a name: never run or read


def test_an_openai_logprobs_object_saved_as_is_reads_as_its_list():
    chat = [{"token": "Paris", "logprob": -0.02, "bytes": [80], "top_logprobs": []},
            {"token": ".", "logprob": 0.0, "top_logprobs": []}]  # fmt: skip
    assert parse_token_logprobs(chat) == [-0.02, 0.0]
    assert parse_token_logprobs({"content": chat, "refusal": None}) == [-0.02, 0.0]
    assert parse_token_logprobs(json.dumps({"content": chat})) == [-0.02, 0.0]  # a CSV cell
    completions = {"tokens": ["Paris"], "token_logprobs": [-0.3], "top_logprobs": None}
    assert parse_token_logprobs(completions) == [-0.3]
    from openai.types.chat.chat_completion import ChoiceLogprobs  # vllm's dependency

    reply = ChoiceLogprobs.model_validate({"content": chat})  # resp.choices[0].logprobs
    assert parse_token_logprobs(reply) == parse_token_logprobs(reply.content) == [-0.02, 0.0]
    with pytest.raises(DataError, match="token 1: is 0.5, above 0"):
        parse_token_logprobs([{"token": "x", "logprob": 0.5}])
    with pytest.raises(DataError, match="is not a list"):
        parse_token_logprobs({"tokens": ["Paris"]})


def test_features_mean_min_first_length_and_nan_when_missing():
    assert FEATURES == ("mean_logprob", "min_logprob", "first_logprob", "answer_tokens")
    np.testing.assert_allclose(logprob_features([-0.5, -2.0, 0.0]), [-2.5 / 3, -2.0, -0.5, 3.0])
    mean_only = logprob_features(None, -1.25)
    assert mean_only[0] == -1.25 and np.isnan(mean_only[1:]).all()
    assert np.isnan(logprob_features(None)).all() and np.isnan(logprob_features([])).all()
    m = feature_matrix({"a": AnswerLogprobs((-1.0,), -1.0)}, ["a", "b"])
    assert m.shape == (2, 4) and m[0].tolist() == [-1.0, -1.0, -1.0, 1.0]
    assert np.isnan(m[1]).all() and feature_matrix({}, []).shape == (0, 4)


def test_an_answer_with_its_mean_alone_is_read_only_where_training_saw_one():
    """A two-stage gate trained on token lists scored a mean of -0.001 (a sure answer) 0.994,
    as it did -3: the three features a mean-only answer lacks were never missing in training.
    Such an answer is now read as none (the question-only score), unless training saw one."""
    from retrieval_gate.data.answer_confidence import AnswerConfidence

    def q(i: int, **extra: object) -> Question:
        return Question(str(i), f"q{i}?", (), "mine", extra=extra)

    tokens = [q(i, token_logprobs=[-0.1 * i, -0.2]) for i in range(1, 6)]
    lists = AnswerConfidence.fit(tokens)
    assert lists.mean_alone is False
    mean_only, none, listed = q(7, mean_logprob=-0.001), q(8), q(9, token_logprobs=[-0.001])
    m = lists.matrix([mean_only, none, listed])
    assert m[0].tolist() == m[1].tolist() and m[0][-1] == 0.0  # no answer read
    assert m[2][-1] == 1.0 and not lists.reads(mean_only) and lists.reads(listed)
    mixed = AnswerConfidence.fit([*tokens, q(6, mean_logprob=-1.0)])
    assert mixed.mean_alone and mixed.reads(mean_only) and mixed.matrix([mean_only])[0][-1] == 1.0
    assert AnswerConfidence.from_dict(lists.to_dict()) == lists
    old = {k: v for k, v in lists.to_dict().items() if k != "mean_alone"}  # before the key
    assert AnswerConfidence.from_dict(old).mean_alone is False
    means = AnswerConfidence.fit([q(i, mean_logprob=-0.1 * i) for i in range(1, 4)])
    old = {k: v for k, v in means.to_dict().items() if k != "mean_alone"}
    assert means.mean_alone and AnswerConfidence.from_dict(old).mean_alone


def test_old_label_files_load_without_token_logprobs(tmp_path):
    """A closed-book file as the committed SmolLM2 labels are: `mean_logprob` only."""
    path = write_jsonl(tmp_path / "closed-book.jsonl",
                  [{"id": "q1", "label": 0, "match": True, "mean_logprob": -0.42, "idk": False},
                   {"id": "q2", "label": 1, "match": False, "mean_logprob": None}])  # fmt: skip
    assert answer_logprobs(path) == {"q1": AnswerLogprobs(None, -0.42)}
    assert math.isnan(answer_logprobs(path)["q1"].features()[1])


class _LogprobGenerator:
    """Answers "So the answer is: Paris" with token log-probabilities when asked for them."""

    name, checksum = "lp-llm", "0" * 64

    def __init__(self):
        self.asked: list[bool] = []

    def generate(self, prompts, max_new_tokens=24, logprobs=False):
        self.asked.append(logprobs)
        lps = [-0.25, 0.0, -1.0] if logprobs else None
        return [Generation("So the answer is: Paris", 10, 3, lps) for _ in prompts]

    def choice_probs(self, prompts, choices):
        return np.full((len(prompts), len(choices)), 1 / len(choices))


def test_closed_book_labelling_records_token_logprobs():
    from retrieval_gate.labels.closed_book import closed_book_rows

    q = Question(id="q1", text="Capital of France?", answers=("Paris",), source="mine")
    (row,) = closed_book_rows(_LogprobGenerator(), [q], {})
    assert row["token_logprobs"] == [-0.25, 0.0, -1.0] and row["mean_logprob"] == -0.4167


def test_strategy_labelling_records_each_strategys_token_logprobs(tmp_path):
    from retrieval_gate.labelling.loop_labelling import StrategyLabelling, label_strategies
    from retrieval_gate.rag.multistep import MultiStepConfig
    from retrieval_gate.retrieval import BM25Retriever, Document

    docs = [Document(id="d0", title="Paris", text="Paris is the capital of France."),
            Document(id="d1", title="Seine", text="The Seine flows through Paris.")]  # fmt: skip
    qs = [Question(id=f"q{i}", text=t, answers=("Paris",), source="mine")
          for i, t in enumerate(["Capital of France?", "Which city is on the Seine?"])]  # fmt: skip
    gen = _LogprobGenerator()
    out = tmp_path / "strategies.jsonl"
    req = StrategyLabelling(qs, out, "lp-llm", k=1, multi_step=MultiStepConfig(max_steps=2),
                            unanswered="exclude")  # fmt: skip
    label_strategies(req, gen, BM25Retriever(docs))
    assert gen.asked and all(gen.asked)
    rows = LabelFile(out).rows
    strategies = LabelFile(out).meta["strategies"]
    assert rows["q0"]["token_logprobs"] == dict.fromkeys(strategies, [-0.25, 0.0, -1.0])
    # the reader picks the file's first strategy (no retrieval) unless told another
    got = answer_logprobs(out)
    assert got["q1"] == AnswerLogprobs((-0.25, 0.0, -1.0), -0.4167)
    assert answer_logprobs(out, strategies[-1])["q1"].token_logprobs == (-0.25, 0.0, -1.0)


def test_the_meter_asks_a_prompt_by_prompt_generator_when_its_call_takes_logprobs():
    """A PartialGenerator (a server, the generation cache) is asked through `try_generate`:
    with `logprobs` when that call takes it, never breaking one that does not."""
    from retrieval_gate.rag.costs import Costs, Meter

    class Partial(_LogprobGenerator):
        def try_generate(self, prompts, max_new_tokens=24, logprobs=False):
            return self.generate(prompts, max_new_tokens, logprobs)

    class Older(_LogprobGenerator):
        def try_generate(self, prompts, max_new_tokens=24):
            return self.generate(prompts, max_new_tokens)

    (g,) = Meter(Costs(), logprobs=True).generate(Partial(), ["q"], ["s"], 8)
    assert g.token_logprobs == [-0.25, 0.0, -1.0]
    (g,) = Meter(Costs(), logprobs=True).generate(Older(), ["q"], ["s"], 8)
    assert g.token_logprobs is None
    (g,) = Meter(Costs()).generate(Partial(), ["q"], ["s"], 8)
    assert g.token_logprobs is None


def test_the_generation_cache_passes_logprobs_to_a_prompt_by_prompt_generator(tmp_path):
    """`label` wraps every generator in the cache: its `try_generate` must ask for (and key)
    the log-probabilities, or strategy rows would silently have none."""
    from retrieval_gate.generation.cache import CachedGenerator, GenerationStore
    from retrieval_gate.rag.costs import Costs, Meter

    class Partial(_LogprobGenerator):
        def try_generate(self, prompts, max_new_tokens=24, logprobs=False):
            return self.generate(prompts, max_new_tokens, logprobs)

    gen = CachedGenerator(Partial(), store=GenerationStore(tmp_path / "c.sqlite"))
    (g,) = Meter(Costs(), logprobs=True).generate(gen, ["q"], ["s"], 8)
    assert g.token_logprobs == [-0.25, 0.0, -1.0]
    (plain,) = gen.try_generate(["q"], 8)  # not asked: a different cache entry, none given
    assert plain.token_logprobs is None


def test_vllm_positions_read_as_the_generated_tokens_log_probabilities():
    """vLLM returns each position as {token_id: Logprob}: with logprobs=0 the generated token
    alone (read, as the object or as its JSON), with logprobs=N also N candidates, unmarked
    (refused with the line that records the generated ones)."""
    from vllm.logprobs import Logprob

    objects = [{17: Logprob(logprob=-0.25, rank=1, decoded_token="Paris")},
               {4: Logprob(logprob=0.0, rank=1, decoded_token=".")}]  # fmt: skip
    assert parse_token_logprobs(objects) == [-0.25, 0.0]
    saved = json.dumps([{str(t): vars(lp) for t, lp in pos.items()} for pos in objects])
    assert parse_token_logprobs(saved, "out.jsonl", 4) == [-0.25, 0.0]
    top2 = [{17: Logprob(-0.25, 1, "Paris"), 9: Logprob(-1.6, 2, "Lyon")}]
    with pytest.raises(DataError, match=r"line 4: column 'token_logprobs', token 1: holds 2 "
                       r"candidate tokens' .*zip\(out.token_ids, out.logprobs\)"):  # fmt: skip
        parse_token_logprobs(top2, "out.jsonl", 4)
