"""The prefill probe (issue 37, part 5): hidden states cached by model, prompt tokens and layer;
the `probe` gate fitted through the registry ranks a synthetic task above chance; a bad layer
or another model's states are refused before any weights load. A tiny random Llama stands in
for SmolLM2 (tests/tiny_backbones.py), so nothing here is slow."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from retrieval_gate import metrics, work
from retrieval_gate.cli import main
from retrieval_gate.errors import ConfigError, InputError
from retrieval_gate.gates.probe import (
    candidate_layers,
    closed_book_prompts,
    parse_layers,
    probe_reader,
)
from retrieval_gate.gates.registry import (
    GateContext,
    GateOptions,
    LazyGenerator,
    build_gate,
    check_options,
)
from retrieval_gate.generation.cache import GenerationStore, computing
from retrieval_gate.generation.hidden_states import HiddenStateReader
from retrieval_gate.labels.evalset import EvalSet
from tiny_backbones import synthetic_questions, tiny_backbone

QUESTIONS, LABELS = synthetic_questions(240, seed=3)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    texts = [q.text for q in QUESTIONS] + ["Please use your own knowledge Answer: Question:"]
    torch.manual_seed(0)  # the random weights: the same in every test order
    return str(tiny_backbone("llama", tmp_path_factory.mktemp("tiny-llama"), texts))


@pytest.fixture
def no_weights(monkeypatch):
    """Loading any model's weights fails the test: what must be refused is refused first."""

    def loaded(*_, **__):
        raise AssertionError("weights loaded")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", loaded)


def _work() -> dict[str, int]:
    w = work.snapshot()
    return {k: w[k] for k in ("llm_calls_computed", "llm_calls_cached", "prefill_tokens_cached")}


def test_states_are_cached_by_model_prompt_tokens_and_layer(tiny, tmp_path):
    reader = HiddenStateReader(tiny, store=GenerationStore(tmp_path / "cache.sqlite"))
    prompts = [q.text for q in QUESTIONS[:5]]
    work.reset()
    first = reader.states(prompts, [1, 2])
    assert _work() == {"llm_calls_computed": 5, "llm_calls_cached": 0, "prefill_tokens_cached": 0}
    again = reader.states(prompts, [2, 1])
    assert _work()["llm_calls_cached"] == 5 and _work()["llm_calls_computed"] == 5
    for layer in (1, 2):  # a cached state is the float32 computed, bit for bit
        assert again[layer].dtype == np.float32 and again[layer].shape == (5, 32)
        np.testing.assert_array_equal(again[layer], first[layer])
    reader.states(prompts, [0])  # another layer: a miss
    assert _work()["llm_calls_computed"] == 10
    reader.states([prompts[0] + " now"], [1])  # another prompt: a miss
    assert _work()["llm_calls_computed"] == 11
    with computing():  # timing a gate: nothing is read from the cache
        reader.states(prompts[:2], [1])
    assert _work()["llm_calls_computed"] == 13
    fresh = HiddenStateReader(tiny, store=None).states(prompts, [1, 2])  # no store: computed
    np.testing.assert_array_equal(fresh[2], first[2])


def test_state_does_not_depend_on_its_batch(tiny):
    reader = HiddenStateReader(tiny, store=None, batch_size=8)
    prompts = [q.text for q in QUESTIONS[:8]]
    together = reader.states(prompts, [2])[2]
    alone = np.stack([reader.states([p], [2])[2][0] for p in prompts])
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_shared_prefix_gives_the_full_prefills_states_for_fewer_tokens(tiny):
    shared, plain = probe_reader(tiny, store=None), HiddenStateReader(tiny, store=None)
    prompts = closed_book_prompts(QUESTIONS[:8]) + ["a prompt of another template"]
    ids, n = shared.prompt_ids(prompts), len(shared.prefix)
    assert n > 10 and all(x[:n] == shared.prefix for x in ids[:8])
    work.reset()
    a = shared.states(prompts, [0, 1, 2])
    # the prefix once, then each prompt's own tokens (the other template's: all of them)
    own = sum(len(x) - n for x in ids[:8]) + len(ids[8])
    assert work.snapshot()["prefill_tokens_computed"] == n + own
    b = plain.states(prompts, [0, 1, 2])
    for layer in (0, 1, 2):
        np.testing.assert_allclose(a[layer], b[layer], rtol=1e-4, atol=1e-5)


def test_a_shallow_layer_runs_only_the_blocks_it_needs(tiny, tmp_path):
    deeper = tmp_path / "four-layers"  # the tiny model's tokenizer, four random blocks
    config = transformers.AutoConfig.from_pretrained(tiny)
    config.num_hidden_layers = 4
    torch.manual_seed(1)
    transformers.LlamaForCausalLM(config).save_pretrained(deeper)
    transformers.AutoTokenizer.from_pretrained(tiny).save_pretrained(deeper)
    prompts = closed_book_prompts(QUESTIONS[:6])
    shallow, full = probe_reader(str(deeper), store=None), probe_reader(str(deeper), store=None)
    two = shallow.states(prompts, [2])[2]
    # blocks 1-3 loaded (what is loaded serves any shallower ask): layer 2 is block 2's output
    assert len(shallow.model(1).layers) == 3
    np.testing.assert_array_equal(two, full.states(prompts, [2, 4])[2])
    assert len(full.model(1).layers) == 4


def _evalset(qs) -> EvalSet:
    y = np.array([LABELS[q.id] for q in qs])
    return EvalSet(tuple(qs), y, np.full(len(qs), np.nan), np.full(len(qs), np.nan))


@pytest.mark.parametrize("dtype", [None, "bfloat16"])
def test_probe_gate_fits_through_the_registry_and_ranks_above_chance(tiny, dtype):
    train, dev, test = QUESTIONS[:160], QUESTIONS[160:200], QUESTIONS[200:]
    context = GateContext(
        _evalset(train), _evalset(dev), generator=LazyGenerator(name_or_path=tiny)
    )
    gate = build_gate("probe", context, GateOptions(probe_model=tiny, probe_dtype=dtype))
    assert gate.reader.dtype == (dtype or "float32")
    assert gate.name == "probe" and gate.layer in (1, 2) and set(gate.dev_auroc) == {1, 2}
    scores = gate.scores(test)
    assert scores.shape == (40,) and ((0 <= scores) & (scores <= 1)).all()
    assert metrics.auroc(_evalset(test).y, scores) > 0.75
    assert gate.scores([]).shape == (0,)


def test_bfloat16_states_are_stored_apart_from_float32_and_close_to_them(tiny, tmp_path):
    store = GenerationStore(tmp_path / "cache.sqlite")
    prompts = closed_book_prompts(QUESTIONS[:12])
    full = HiddenStateReader(tiny, store=store).states(prompts, [1, 2])
    half = HiddenStateReader(tiny, store=store, dtype="bfloat16")
    work.reset()
    states = half.states(prompts, [1, 2])
    assert _work()["llm_calls_computed"] == 12  # not served from the float32 entries
    for layer in (1, 2):
        assert states[layer].dtype == np.float32 and not np.array_equal(states[layer], full[layer])
        np.testing.assert_allclose(states[layer], full[layer], rtol=0.05, atol=0.05)
    with pytest.raises(InputError, match="dtype 'int8': use one of float32, bfloat16"):
        HiddenStateReader(tiny, store=None, dtype="int8")


def test_layers_flag_parsing():
    assert candidate_layers(30) == [3, 6, 9, 12, 15, 18, 21, 24, 27, 30]
    assert candidate_layers(2) == [1, 2]
    assert parse_layers("auto", 30, "m") == candidate_layers(30)
    assert parse_layers("12, 6", 30, "m") == [6, 12]
    for bad in ("x", "31", "-1", ","):
        with pytest.raises(InputError, match="--probe-layers"):
            parse_layers(bad, 30, "m")


def test_bad_layer_is_refused_before_any_weights_load(tiny, no_weights):
    with pytest.raises(InputError, match=r"--probe-layers 7 is out of range: .* has 2 layers"):
        check_options(["probe"], GateOptions(probe_model=tiny, probe_layers="7"))
    with pytest.raises(InputError, match="--probe-model"):
        check_options(["probe"], GateOptions(probe_model="/no/such/model"))


def test_evaluate_refuses_a_bad_layer_in_one_line(tiny, tmp_path, no_weights, capsys,
                                                  monkeypatch):  # fmt: skip
    """Refused from the model's config.json before the labels are read and before transformers
    reads the config: it took 22 s on 2 cores (7 s of SmolLM2's labels, 12 s of transformers'
    imports, 5 s of matplotlib's)."""
    from retrieval_gate.evaluation import gate_comparison
    from retrieval_gate.generation import model_folders

    def never(what: str):
        def called(*_, **__):
            raise AssertionError(f"{what} before the flag was checked")

        return called

    monkeypatch.setattr(gate_comparison, "load_splits", never("the labels read"))
    monkeypatch.setattr(model_folders, "read_config", never("transformers read the config"))
    argv = ["evaluate", "--gates", "probe", "--labels",
            "data/labels/smollm2-135m-instruct/closed-book.jsonl", "--probe-model", tiny,
            "--probe-layers", "3", "--out", str(tmp_path / "ev"), "--no-cost"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--probe-layers 3 is out of range" in err and "Traceback" not in err
    assert not (tmp_path / "ev").exists()


def test_another_models_states_are_refused_naming_it(tiny, tmp_path, no_weights):
    other = str(tiny_backbone("llama", tmp_path / "other", [q.text for q in QUESTIONS]))
    context = GateContext(_evalset(QUESTIONS[:20]), _evalset(QUESTIONS[20:40]),
                          generator=LazyGenerator(name_or_path=other))  # fmt: skip
    with pytest.raises(ConfigError, match=r"hidden states of .*tiny-llama.* generator serving is"):
        build_gate("probe", context, GateOptions(probe_model=tiny))
