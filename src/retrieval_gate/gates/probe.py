"""The prefill probe, a white-box gate: a linear head on the generator's hidden state after
it has read the closed-book prompt (one prefill, no decoding).

Each question becomes the project's closed-book prompt through the model's chat template (the
prompt the closed-book labels were made with); `HiddenStateReader` gives the state of a layer
at the prompt's last token; a logistic regression over the standardised state predicts the
closed-book label (1: the answer was wrong, so the question needs retrieval). The layer and the
regularisation C are chosen by AUROC on the dev split, the head fitted on train, as the TF-IDF
gate is. Score = P(wrong), like every gate's; threshold 0.5 (balanced class weights).

The states must come from the model that serves (the one whose answers the labels judge):
a probe model whose weights differ from the serving generator's is refused, naming both,
before any weights load; so is a layer the model does not have."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from .. import metrics, work
from ..blas import one_blas_thread
from ..errors import ConfigError, InputError, MissingInputError
from ..generation.hidden_states import (
    DTYPE,
    HiddenStateReader,
    config_num_layers,
    model_num_layers,
)
from ..generation.model_folders import folder_checksum, resolve_generator_model
from ..generation.prompts import closed_book_prompt
from ..labels.evalset import EvalSet
from ..models import SMOLLM2
from ..questions import Question
from .base import Questions, as_questions

LAYERS_FLAG = "--probe-layers"
MODEL_FLAG = "--probe-model"
CS = (0.001, 0.01, 0.1, 1.0)  # the head's regularisation, chosen on dev
SCAN_C = 0.01  # the C layers are compared at


def candidate_layers(num_layers: int) -> list[int]:
    """About ten layers spread over the stack, the last included (30 layers: 3, 6, ..., 30)."""
    step = max(1, round(num_layers / 10))
    return sorted({*range(step, num_layers + 1, step), num_layers})


def parse_layers(value: str | None, num_layers: int, model: str) -> list[int]:
    """`--probe-layers`: none or "auto" -> `candidate_layers`; "12" or "6,12,18" -> those
    (several: the best on dev is kept)."""
    if value is None or str(value).strip().lower() in ("", "auto"):
        return candidate_layers(num_layers)
    try:
        layers = sorted({int(x) for x in str(value).split(",") if x.strip()})
    except ValueError:
        raise InputError(f"{LAYERS_FLAG} takes layer numbers like 12 or 6,12,18 (or auto), "
                         f"got {value!r}") from None  # fmt: skip
    bad = [x for x in layers if not 0 <= x <= num_layers]
    if not layers or bad:
        raise InputError(f"{LAYERS_FLAG} {bad[0] if bad else value!r} is out of range: {model} "
                         f"has {num_layers} layers; pass 1-{num_layers} (0: the embeddings)")  # fmt: skip
    return layers


def probe_model_path(model: str | None) -> str:
    """`--probe-model` resolved (SmolLM2 by default; prepared on first use), errors naming
    the flag."""
    try:
        return resolve_generator_model(model or SMOLLM2)
    except InputError as e:
        raise InputError(f"{MODEL_FLAG}: {e}") from None


def check_probe_options(model: str | None, layers: str | None) -> list[int]:
    """The layers asked for, checked against the model's config (no weights loaded): against
    its config.json first, so a layer out of range is refused before transformers loads (12 s
    on 2 cores), then against transformers' reading of it, which has the last word."""
    path, name = probe_model_path(model), model or SMOLLM2
    stated = config_num_layers(path)
    if stated is not None:
        parse_layers(layers, stated, name)
    return parse_layers(layers, model_num_layers(path), name)


def check_same_model(model: str | None, serving_checksum: str, serving: str) -> None:
    """The probe reads the serving generator's own states, or refuses (no weights loaded)."""
    path = probe_model_path(model)
    mine = folder_checksum(Path(path)) if Path(path).is_dir() else path
    if mine != serving_checksum:
        raise ConfigError(
            f"the probe would read the hidden states of {model or SMOLLM2} (weights "
            f"{mine[:12]}) but the generator serving is {serving} (weights "
            f"{serving_checksum[:12]}): a probe reads the model whose answers the labels judge; "
            f"pass {MODEL_FLAG} with the serving model's folder"
        )


def closed_book_prompts(questions: Sequence[Question]) -> list[str]:
    return [closed_book_prompt(q.text) for q in questions]


def probe_reader(model: str | None = None, **kw: Any) -> HiddenStateReader:
    """The states reader of `model`, the closed-book template's prefix prefilled once."""
    reader = HiddenStateReader(model or SMOLLM2, **kw)
    two = [closed_book_prompt("a"), closed_book_prompt("b")]  # they differ at the question
    reader.share_prefix(two)
    return reader


@dataclass
class ProbeGate:
    """P(needs retrieval) = a fitted head over one layer's last-prompt-token state."""

    reader: HiddenStateReader
    layer: int
    head: Pipeline
    threshold: float = 0.5
    name: str = "probe"
    # dev AUROC of each candidate layer (at SCAN_C), and the C kept: the fit's record
    dev_auroc: dict[int, float | None] = field(default_factory=dict)
    c: float | None = None

    @property
    def model_checksum(self) -> str:
        return self.reader.checksum

    def states(self, questions: Questions) -> np.ndarray:
        prompts = closed_book_prompts(as_questions(questions))
        return self.reader.states(prompts, [self.layer])[self.layer]

    def scores(self, questions: Questions) -> np.ndarray:
        qs = as_questions(questions)
        if not qs:
            return np.zeros(0)
        work.add(questions_scored=len(qs))
        return self.head.predict_proba(self.states(qs))[:, 1]

    @classmethod
    def fit(
        cls,
        reader: HiddenStateReader,
        train: EvalSet,
        dev: EvalSet,
        layers: Sequence[int] | None = None,
        cs: Sequence[float] = CS,
    ) -> ProbeGate:
        """Layer, then C, by dev AUROC among `layers` (default `candidate_layers`) and `cs`
        (`select_layer`); the head fitted on train. One prefill per question gives every
        candidate layer."""
        layers = list(layers or candidate_layers(reader.num_layers))
        for name, part in (("train", train), ("dev", dev)):
            if len(set(np.asarray(part.y).astype(int).tolist())) < 2:
                raise MissingInputError(f"probe gate: the {name} questions have only one label")
        x_train = reader.states(closed_book_prompts(train.questions), layers)
        x_dev = reader.states(closed_book_prompts(dev.questions), layers)
        picked = select_layer(x_train, train.y, x_dev, dev.y, cs)
        if reader.depth_for([picked.layer]) < reader.num_layers:
            reader.unload()  # scoring then loads (and runs) only the blocks its layer needs
        return cls(reader, picked.layer, picked.head, dev_auroc=picked.dev_auroc, c=picked.c)


@dataclass
class LayerChoice:
    layer: int
    c: float
    head: Pipeline
    dev_auroc: dict[int, float | None]


def fit_head(x: np.ndarray, y: np.ndarray, c: float, seed: int = 0) -> Pipeline:
    head = make_pipeline(
        StandardScaler(),
        # balanced: most questions are answered wrong by a small LLM (93% for SmolLM2)
        LogisticRegression(C=c, class_weight="balanced", max_iter=3000, random_state=seed),
    )
    return head.fit(x, np.asarray(y).astype(int))


@one_blas_thread()
def select_layer(
    x_train: dict[int, np.ndarray],
    y_train: np.ndarray,
    x_dev: dict[int, np.ndarray],
    y_dev: np.ndarray,
    cs: Sequence[float] = CS,
    scan_c: float = SCAN_C,
) -> LayerChoice:
    """The layer of the best dev AUROC at C = `scan_c`, then the C of the best dev AUROC at
    that layer (layers + C's fits, not layers x C's: weak C's fit slowest on thousands of
    states), with its head and every layer's dev AUROC at `scan_c`."""

    def dev_auroc(layer: int, c: float) -> tuple[float | None, Pipeline]:
        head = fit_head(x_train[layer], y_train, c)
        return metrics.auroc(y_dev, head.predict_proba(x_dev[layer])[:, 1]), head

    scanned = {k: dev_auroc(k, scan_c)[0] for k in sorted(x_train)} if len(x_train) > 1 else {}
    layer = max(scanned, key=lambda k: scanned[k] or 0.0) if scanned else next(iter(x_train))
    tried = {c: dev_auroc(layer, c) for c in cs}
    c = max(tried, key=lambda k: tried[k][0] or 0.0)
    auc, head = tried[c]
    if auc is None:
        raise MissingInputError("probe gate: the dev questions have only one label")
    return LayerChoice(layer, c, head, scanned or {layer: auc})


def fit_probe(
    train: EvalSet,
    dev: EvalSet,
    model: str | None = None,
    layers: str | None = None,
    serving: tuple[str, str] | None = None,
    dtype: str | None = None,
) -> ProbeGate:
    """The registry's builder: options checked, the serving model matched (`serving`: its
    weights checksum and name), then the reader built (`dtype`: the weights' precision,
    float32 unless asked) and the probe fitted."""
    asked = check_probe_options(model, layers)
    if serving is not None:
        check_same_model(model, *serving)
    return ProbeGate.fit(probe_reader(model, dtype=dtype or DTYPE), train, dev, asked)
