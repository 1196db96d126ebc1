"""YAML the user writes is read strictly (yaml_files.py): a key given twice in one mapping is
an error naming it, where PyYAML kept the last one and dropped the first without a word; so
are aliases that expand to billions of values and a value that holds itself."""

from __future__ import annotations

import pytest
import yaml

from retrieval_gate.errors import ConfigError
from retrieval_gate.strategies import load_strategies
from retrieval_gate.training import load_config
from retrieval_gate.training.config import read_run_config
from retrieval_gate.yaml_files import load_yaml


def test_a_repeated_key_is_refused_and_the_rest_reads_as_safe_load_does():
    text = "a: 1\nb: {x: [1, 2], y: null}\nc: &anchor {k: 1}\nd:\n  <<: *anchor\n  k: 2\n"
    assert load_yaml(text) == yaml.safe_load(text)  # merge keys may override: not a repeat
    with pytest.raises(yaml.YAMLError, match=r"key 'a' is given twice \(lines 1 and 3\)"):
        load_yaml("a: 1\nb: 2\na: 3\n")
    with pytest.raises(yaml.YAMLError, match=r"key 'r' is given twice \(line 1\)"):
        load_yaml("{r: 4, r: 8}")


def test_configs_overrides_and_strategies_files_refuse_a_repeated_key(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("extends: minilm-closed-book\ntrainer:\n  max_epochs: 1\n"
                      "trainer:\n  max_epochs: 3\n")  # fmt: skip
    with pytest.raises(ConfigError, match=r"c.yaml: config is not valid YAML: key 'trainer'"):
        load_config(config)
    with pytest.raises(ConfigError, match=r"--set 'model.lora=\{r: 4, r: 8\}'.*key 'r'"):
        load_config("minilm-closed-book", ["model.lora={r: 4, r: 8}"])
    strategies = tmp_path / "s.yaml"
    strategies.write_text("strategies:\n  - name: no_retrieval\n    cost: 0\n    cost: 1\n")
    with pytest.raises(ConfigError, match=r"s.yaml: strategies file is not valid YAML: key 'cost'"):
        load_strategies(strategies)


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (b"model: {name: caf\xe9}\n", r"not valid UTF-8 \(byte 17\).*iconv -f CP1252"),
        (b"a: " + b"[" * 50_000, "nested too deeply"),
        # UTF-16 without its byte-order mark: PyYAML said "unacceptable character #x0000"
        ("a: 1\n".encode("utf-16-le"), r"holds a NUL byte \(byte 1\): this is UTF-16 text"),
    ],
)
def test_a_yaml_file_not_utf8_or_nested_too_deep_is_a_config_error(tmp_path, damage, why):
    """The first two were internal errors: UnicodeDecodeError and RecursionError are not
    YAMLErrors."""
    config, strategies, run = tmp_path / "c.yaml", tmp_path / "s.yaml", tmp_path / "config.yaml"
    for path in (config, strategies, run):
        path.write_bytes(damage)
    with pytest.raises(ConfigError, match=f"c.yaml: config is not valid YAML: {why}"):
        load_config(config)
    with pytest.raises(ConfigError, match=f"s.yaml: strategies file is not valid YAML: {why}"):
        load_strategies(strategies)
    with pytest.raises(
        ConfigError, match=f"(?s)config.yaml: config is not valid YAML: {why}.*re-train"
    ):
        read_run_config(run)  # a run's own config.yaml, damaged


def test_nesting_is_refused_at_a_hundred_levels_where_the_scanner_reaches_it():
    """`a: [[[[...` was refused only at Python's recursion limit (~490 levels), after 2.6 s of
    PyYAML's scanner, whose work grows with the square of the depth: the 101st level is now
    refused where the scanner (flow) or the composer (block) meets it."""
    nested: list = []
    for _ in range(98):
        nested = [nested]
    assert load_yaml("a: " + "[" * 99 + "]" * 99) == {"a": nested}  # 100 levels with `a`
    for deep, where in ((f"a: {'[' * 50_000}", "line 1, column 104"),
                        ("".join(f"{' ' * i}k{i}:\n" for i in range(101)) + " " * 101 + "1",
                         "line 100, column 100")):  # fmt: skip
        with pytest.raises(yaml.YAMLError, match=f"more than 100 levels\n  in .*, {where}"):
            load_yaml(deep)
    assert load_yaml('a: "' + "[" * 5_000 + '"') == {"a": "[" * 5_000}  # text, not nesting


def _laughs(levels: int = 9) -> str:
    """A 'billion laughs' value in one line: 9 ** levels strings from a few hundred bytes."""
    value = "&b0 [" + ", ".join(['"lol"'] * 9) + "]"
    for i in range(1, levels):
        value = f"&b{i} [{value}, " + ", ".join([f"*b{i - 1}"] * 8) + "]"
    return value


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (_laughs(), "aliases expand to more than 1,000,000 values"),
        ("&a [1, *a]", "an alias refers to a value that holds it"),
    ],
)
def test_aliases_that_expand_past_a_million_values_or_hold_themselves_are_refused(
    tmp_path, value, why
):
    """Both read: the config's type check then built the repr of 387 million strings for its
    message (a MemoryError after 30 s and 3 GB), and a cycle has no end for json.dumps."""
    config, strategies = tmp_path / "c.yaml", tmp_path / "s.yaml"
    config.write_text(f"trainer:\n  max_epochs: {value}\n")
    with pytest.raises(ConfigError, match=f"(?s)c.yaml: config is not valid YAML: {why}.*line 2"):
        load_config(config)
    with pytest.raises(ConfigError, match=f"--set 'trainer.max_epochs=.*{why}"):
        load_config("minilm-closed-book", [f"trainer.max_epochs={value}"])
    strategies.write_text(f"strategies:\n  - name: none\n    cost: 0\n    description: {value}\n")
    with pytest.raises(ConfigError, match=f"s.yaml: strategies file is not valid YAML: {why}"):
        load_strategies(strategies)
    assert len(load_yaml(f"a: {_laughs(6)}")["a"]) == 9  # 531,441 values: still read


def test_a_string_escaping_a_lone_surrogate_is_refused_with_its_line(tmp_path):
    """A run named "a\\ud800" ended in an internal error at the first file it opened."""
    with pytest.raises(yaml.YAMLError, match=r"'\\udc00' is a lone surrogate(.|\n)*line 2"):
        load_yaml('run:\n  name: "b\\udc00"\n')
    with pytest.raises(ConfigError, match=r"--set 'run.name=.*lone surrogate"):
        load_config("minilm-closed-book", ['run.name="a\\ud800"'])
    assert load_yaml('a: "\\ud83d\\ude00 \\\\ud800"') == {"a": "\U0001f600 \\ud800"}
