"""How `train` reads a config file and its `--set` overrides: an empty section in a config that
`extends:` another keeps the parent's (it dropped it whole), `extends:` takes a name or a list
of names, a key set twice through a section's mapping is refused as a plain repeat is, and
scalars YAML 1.1 reads otherwise than written (`010` as 8, `1:30` as 90, `yes` as true) are
refused where they would be misread."""

from __future__ import annotations

import re

import pytest

from retrieval_gate.errors import ConfigError
from retrieval_gate.training.config import load_config
from retrieval_gate.yaml_files import load_yaml

STACKED = "minilm-stacked-closed-book"  # head: stacked, pooling: mean (by its backbone)


@pytest.mark.parametrize("section", ["model:\n#  head_lr: 1e-4\n", "model: null\n", "model: {}\n"])
def test_an_empty_section_keeps_the_parents(tmp_path, section):
    """A child's `model:` with every key commented out loaded as head=linear, pooling=None,
    source_model=True: a full fine-tune where the parent trained a stacked head."""
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"extends: {STACKED}\nrun:\n  name: mine\n{section}data: null\ntrainer:\n")
    config = load_config(mine)
    parent = load_config(STACKED)
    assert config.model == parent.model and config.model.head == "stacked"
    assert config.data == parent.data and config.data.label_file  # "needs data.label_file"
    assert config.trainer == parent.trainer and config.run.name == "mine"


def test_a_null_value_still_replaces_the_parents(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"extends: {STACKED}\ndata:\n  max_eval_examples: null\n"
                    "model:\n  pooling: null\n")  # fmt: skip
    config = load_config(mine)
    assert config.data.max_eval_examples is None and config.model.pooling is None
    assert config.model.head == "stacked"


def test_a_set_mapping_does_not_drop_a_section_inside_one():
    """`--set model.lora=null` was refused and `model={lora: null}` dropped LoRA, unsaid."""
    with pytest.raises(ConfigError, match=r"model\.lora is a section \(r, .*\), which a value "
                       r"would drop whole: set its keys, e.g. model\.lora\.r=VALUE"):  # fmt: skip
        load_config("minilm-lora-closed-book", ["model={lora: null}"])
    config = load_config("minilm-lora-closed-book", ["model={lora: {r: 4}, dropout: 0.2}"])
    assert config.model.lora.r == 4 and config.model.lora.alpha == 16
    assert config.model.dropout == 0.2


@pytest.mark.parametrize("extends", ["5", "{x: 1}", "true", "0", "[minilm, 3]", "''"])
def test_extends_takes_a_name_or_a_list_of_names(tmp_path, extends):
    """`extends: 5` was a traceback (int is not iterable); `extends: {x: 1}` read `x`;
    `extends: 0` extended nothing, unsaid."""
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"extends: {extends}\n")
    with pytest.raises(ConfigError, match=r"mine.yaml: `extends: .*`: name a config file"):
        load_config(mine, ["data.label_file=x"])


def test_extends_a_name_a_list_or_nothing(tmp_path):
    mine = tmp_path / "mine.yaml"
    for extends, head in (("extends:", "linear"), (f"extends: {STACKED}", "stacked"),
                          (f"extends: [minilm, {STACKED}]", "stacked")):  # fmt: skip
        mine.write_text(f"{extends}\n")
        assert load_config(mine, ["data.label_file=x"]).model.head == head


@pytest.mark.parametrize(
    ("items", "key"),
    [
        (["model.lr=1e-3", "model={lr: 2e-2}"], "model.lr"),  # trained with 0.02
        (["model.lora.r=4", "model.lora={r: 16}"], "model.lora.r"),  # gave 16
        (["model={lora: {r: 16}}", "model.lora.r=4"], "model.lora.r"),
        (["model={lr: 1e-3}", "model={lr: 2e-2}"], "model.lr"),
    ],
)
def test_a_key_set_twice_through_a_mapping_is_refused(items, key):
    with pytest.raises(ConfigError, match=rf"--set gives {key} more than once \('{items[0]}' "
                       rf"and '{items[1]}'\); keep one"):  # fmt: skip
        load_config("minilm-lora-closed-book", items)


def test_different_keys_through_mappings_and_plain_repeats_of_callers_pass():
    items = ["model.lora={r: 4}", "model.lora={alpha: 8}", "model.lr=1e-3"]
    config = load_config("minilm-lora-closed-book", items)
    assert (config.model.lora.r, config.model.lora.alpha, config.model.lr) == (4, 8, 1e-3)
    # a caller appends its own keys (tune's data.label_file, transfer's run.name): last wins;
    # the command refuses a user's plain repeat itself (strict_rows.check_overrides)
    assert load_config(STACKED, ["run.name=a", "run.name=b"]).run.name == "b"


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            "run.seed=010",
            r"run\.seed: YAML 1\.1 reads 010 as an octal number \(8\); write it in "
            r"decimal \(e\.g\. 10\), or quote it if it is text: run\.seed=\"'010'\"",
        ),
        (
            "data.max_train_examples=1:30",
            r"reads 1:30 as a base-60 number \(90\); write it in "
            r"decimal \(e\.g\. 90\)",
        ),
        ("trainer.max_epochs=0x3", r"reads 0x3 as a hex number \(3\)"),
        ("trainer.max_epochs=0b11", r"reads 0b11 as a binary number \(3\)"),
        (
            "run.name=yes",
            r"run\.name: YAML 1\.1 reads yes as a boolean \(True\); quote it if it "
            r"is text: run\.name=\"'yes'\"",
        ),
        (
            "run.name=0755",
            r"reads 0755 as an octal number \(493\); quote it if it is text: "
            r"run\.name=\"'0755'\"",
        ),
        ("run.name=12:30", r"reads 12:30 as a base-60 number \(750\)"),
        ("model.pooling=off", r"reads off as a boolean \(False\)"),
        ("model={lr: 010}", r"model\.lr: YAML 1\.1 reads 010 as an octal"),
        (
            "data.datasets=[no]",
            r"data\.datasets\[0\]: YAML 1\.1 reads no as a boolean \(False\); "
            r"quote it if it is text: 'no'",
        ),
    ],
)
def test_a_set_value_yaml_1_1_misreads_is_refused(item, message):
    with pytest.raises(ConfigError, match=rf"--set '{re.escape(item)}': .*{message}"):
        load_config(STACKED, [item])


def test_ordinary_numbers_and_booleans_read_as_before():
    items = ["run.seed=10", "model.lr=1e-3", "data.max_train_examples=900", "run.name='yes'",
             "trainer.deterministic=yes", "trainer.enable_progress_bar=off", "run.num_threads=1",
             "model.source_model=true"]  # fmt: skip
    config = load_config(STACKED, items)
    assert (config.run.seed, config.model.lr, config.data.max_train_examples) == (10, 1e-3, 900)
    assert config.trainer["deterministic"] is True and config.run.name == "yes"
    assert config.trainer["enable_progress_bar"] is False and config.model.source_model is True


def test_a_config_file_yaml_1_1_misreads_is_refused_naming_the_line(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"extends: {STACKED}\nrun:\n  seed: 010\n")
    with pytest.raises(ConfigError, match=r"mine\.yaml, line 3: run\.seed: YAML 1\.1 reads 010 "
                       r"as an octal number \(8\); .*quote it if it is text: '010'"):  # fmt: skip
        load_config(mine)
    mine.write_text(f"extends: {STACKED}\ntrainer:\n  deterministic: yes\n")  # a flag: true
    assert load_config(mine).trainer["deterministic"] is True


def test_load_yaml_lists_what_yaml_1_1_misreads():
    found: list = []
    text = "a: 010\nb: [yes, '010', 0, 00, 1_000, 1e3, 0x1f]\nc: &x {d: 1:30}\ne: {<<: *x}\n"
    assert load_yaml(text, found) == load_yaml(text)
    assert [(m.path, m.text, m.value, m.kind, m.line) for m in found] == [
        (("a",), "010", 8, "an octal number", 1),
        (("b", 0), "yes", True, "a boolean", 2),
        (("b", 3), "00", 0, "an octal number", 2),
        (("b", 6), "0x1f", 31, "a hex number", 2),
        (("c", "d"), "1:30", 90, "a base-60 number", 3),
    ]
