"""Small randomly initialised RoBERTa / T5 / Llama models with tokenizers built here (no hub),
a synthetic question set and label file: shared by test_training.py and test_export.py."""

from __future__ import annotations

import json
import random
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    RobertaConfig,
    RobertaModel,
    T5Config,
    T5EncoderModel,
)

from retrieval_gate.questions import Question
from retrieval_gate.training.config import TrainConfig

WORDS_KNOWN = ["capital", "france", "paris", "author", "hamlet", "color", "sky", "sun"]
WORDS_RARE = ["zorblat", "quenvik", "marrowind", "tesque", "ulbrecht", "vantoby", "grisk"]


def synthetic_questions(n: int = 160, seed: int = 0) -> tuple[list[Question], dict[str, int]]:
    """Questions whose label a model can pick up from the words (rare entity -> retrieval)."""
    rng = random.Random(seed)
    qs, labels = [], {}
    for i in range(n):
        y = i % 2
        words = rng.sample(WORDS_RARE if y else WORDS_KNOWN, 3)
        text = f"what is the {words[0]} of {words[1]} {words[2]} number {i}?"
        qs.append(Question(id=f"q{i}", text=text, answers=("x",), source=f"src{i % 3}"))
        labels[f"q{i}"] = y
    return qs, labels


def write_label_file(path: Path, labels: dict[str, int], three_way: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for qid, y in labels.items():
            row = {"id": qid, "label": y}
            if three_way:
                row["label3"] = y * (1 + int(qid.endswith(("3", "7"))))
            f.write(json.dumps(row) + "\n")
    path.with_name(path.stem + ".meta.json").write_text(json.dumps({"policy": "synthetic"}))
    return path


def _tokenizer(texts: list[str], template: str, specials: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=200, special_tokens=specials))
    ids = [(s, tok.token_to_id(s)) for s in specials if s in template]
    tok.post_processor = processors.TemplateProcessing(single=template, special_tokens=ids)
    return tok


def tiny_backbone(kind: str, folder: Path, texts: list[str]) -> Path:
    """A saved tiny model + tokenizer folder for `roberta`, `t5` or `llama`."""
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "roberta":
        specials = ["<pad>", "<unk>", "<s>", "</s>"]
        tok = _tokenizer(texts, "<s> $A </s>", specials)
        hf_tok = PreTrainedTokenizerFast(
            tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
            eos_token="</s>", cls_token="<s>", sep_token="</s>",
        )  # fmt: skip
        cfg = RobertaConfig(
            vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=64, max_position_embeddings=160,
            pad_token_id=0,
        )  # fmt: skip
        model = RobertaModel(cfg, add_pooling_layer=False)
    elif kind == "t5":
        specials = ["<pad>", "</s>", "<unk>"]
        tok = _tokenizer(texts, "$A </s>", specials)
        hf_tok = PreTrainedTokenizerFast(
            tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
        )
        cfg = T5Config(
            vocab_size=tok.get_vocab_size(), d_model=32, d_kv=16, d_ff=64, num_layers=2,
            num_heads=2, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
        )  # fmt: skip
        model = T5EncoderModel(cfg)
    elif kind == "llama":
        specials = ["<|endoftext|>", "<unk>"]
        tok = _tokenizer(texts, "$A", specials)
        hf_tok = PreTrainedTokenizerFast(
            tokenizer_object=tok, eos_token="<|endoftext|>", unk_token="<unk>"
        )  # no pad token, like SmolLM2's base tokenizer: the loader must cope
        cfg = LlamaConfig(
            vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64,
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            max_position_embeddings=256, tie_word_embeddings=True,
        )  # fmt: skip
        model = LlamaForCausalLM(cfg)  # saved as a causal LM, like the real generator
    else:
        raise ValueError(kind)
    model.save_pretrained(folder)
    hf_tok.save_pretrained(folder)
    return folder


def tiny_release_router_sets(folder: Path) -> list[str]:
    """`--set` overrides that train the shipped router config
    (router-adaptive-rag-llama8b.yaml) on the Adaptive-RAG release in seconds: a tiny RoBERTa
    body (its tokenizer fitted on the release's questions, written to `folder`) for MiniLM,
    240 training and 60 evaluation examples."""
    from retrieval_gate.data.adaptive_rag import release_questions

    body = tiny_body_sets(folder, [q.text for q in release_questions()])
    return [*body, "data.max_train_examples=240", "data.max_eval_examples=60"]


def tiny_body_sets(folder: Path, texts: list[str]) -> list[str]:
    """`--set` overrides that put a tiny RoBERTa body (its tokenizer fitted on `texts`, written
    to `folder`) in place of MiniLM in a MiniLM config: for a test whose questions' wording
    tells nothing, where MiniLM's encoding and export took seconds and decided nothing."""
    body = tiny_backbone("roberta", folder, texts)
    return [f"model.name={body}", "model.pooling=cls"]


def tiny_config(label_file: Path, out: Path, backbone: str, name: str, **model) -> TrainConfig:
    """A full training config for a couple of quick CPU steps."""
    from retrieval_gate.training import load_config

    lora = {"r": 4, "alpha": 8, "dropout": 0.0}
    overrides = [
        f"data.label_file={label_file}",
        f"run.output_dir={out}",
        f"run.name={backbone}-{Path(name).name}",
        f"model.backbone={backbone}",
        f"model.name={name}",
        "data.max_length=24",
        "data.batch_size=16",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=3",
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        "model.lr=1e-3",
    ]
    if backbone != "encoder":
        overrides.append(f"model.lora={json.dumps(lora)}")
    overrides += [f"model.{k}={json.dumps(v)}" for k, v in model.items()]
    return load_config(None, overrides)


def minilm_gate_questions() -> tuple[list[Question], dict[str, int]]:
    """The synthetic questions and labels `minilm_gate` trains on."""
    return synthetic_questions(64, seed=2)


def minilm_gate(
    root: Path, variants: tuple[str, ...] = ("fp32", "opt", "int8")
) -> tuple[Path, Path]:
    """(run folder, export folder) of a MiniLM gate trained for 2 batches on synthetic
    questions, threshold tuned to 0.42, with the CPU variants (test_export checks each; fp16
    is checked on a tiny RoBERTa): for tests that need a real exported gate."""
    from retrieval_gate.export.build import build_export
    from retrieval_gate.models import minilm_path
    from retrieval_gate.training import save_threshold, train

    questions, labels = minilm_gate_questions()
    cfg = tiny_config(write_label_file(root / "labels.jsonl", labels), root / "ck", "encoder",
                      str(minilm_path()))  # fmt: skip
    cfg = cfg.override("run.name=minilm-gate", "trainer.limit_train_batches=2")
    run_dir = train(cfg, questions=questions)
    save_threshold(run_dir, 0.42, "max macro-F1 on dev", {"macro_f1": 0.9})
    texts = [q.text for q in questions[:16]]
    parity = (texts, [labels[q.id] for q in questions[:16]])
    export_dir, _ = build_export(run_dir, root / "export" / "minilm-gate", variants, parity=parity)
    return run_dir, export_dir
