"""Example configs by name (`train --config minilm-closed-book`) as well as by path, and the
paths inside a config read from the project it belongs to when the working directory is
elsewhere (so `train --config` works outside the checkout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval_gate.errors import ConfigError
from retrieval_gate.training.config import find_config, load_config

CHECKOUT = Path(__file__).resolve().parents[1]


def test_a_name_finds_the_example_config_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert find_config("minilm-closed-book") == (
        CHECKOUT / "configs" / "experiments" / "minilm-closed-book.yaml"
    )
    assert find_config("minilm").name == "minilm.yaml"  # configs/backbones
    config = load_config("minilm-closed-book")
    label_file = Path(config.data.label_file)
    assert label_file.is_absolute() and label_file.is_file()  # the checkout's labels
    assert label_file == CHECKOUT / "data/labels/smollm2-135m-instruct/closed-book.jsonl"
    # an override on the command line is the user's path, read from where they are
    assert load_config("minilm-closed-book", ["data.label_file=mine.jsonl"]).data.label_file == (
        "mine.jsonl"
    )


def test_inside_the_checkout_paths_stay_as_written(monkeypatch):
    monkeypatch.chdir(CHECKOUT)
    config = load_config("configs/experiments/minilm-closed-book.yaml")
    assert config.data.label_file == "data/labels/smollm2-135m-instruct/closed-book.jsonl"


def test_an_unknown_name_lists_the_examples():
    with pytest.raises(ConfigError, match="examples: .*minilm-closed-book"):
        find_config("minilm-closed-bok")


def test_a_mapping_set_for_a_section_is_merged_and_a_value_refused():
    """`--set "model={dropout: 0.2}"` replaced the whole section: the stacked recipe's
    `head: stacked` was gone and a full fine-tune ran, unsaid; `model=null` the same."""
    cfg = load_config("minilm-stacked-closed-book", ["model={dropout: 0.2}"])
    assert cfg.model.head == "stacked" and cfg.model.dropout == 0.2
    for value in ("null", "3", "[a]"):
        with pytest.raises(ConfigError, match=r"model is a section \(.*\), which a value would "
                           r"drop whole: set its keys, e.g. model\.\w+=VALUE"):  # fmt: skip
            load_config("minilm-stacked-closed-book", [f"model={value}"])
    assert (
        load_config("minilm-stacked-closed-book", ["data.label_file=null"]).data.label_file is None
    )
