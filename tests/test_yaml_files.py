"""YAML the user writes is read strictly (yaml_files.py): a key given twice in one mapping is
an error naming it, where PyYAML kept the last one and dropped the first without a word."""

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


@pytest.mark.parametrize("damage", [b"model: {name: caf\xe9}\n", b"a: " + b"[" * 50_000])
def test_a_yaml_file_not_utf8_or_nested_too_deep_is_a_config_error(tmp_path, damage):
    """Both were internal errors: UnicodeDecodeError and RecursionError are not YAMLErrors."""
    why = r"not UTF-8 text \(byte 17\)" if b"\xe9" in damage else "nested too deeply"
    config, strategies, run = tmp_path / "c.yaml", tmp_path / "s.yaml", tmp_path / "config.yaml"
    for path in (config, strategies, run):
        path.write_bytes(damage)
    with pytest.raises(ConfigError, match=f"c.yaml: config is not valid YAML: {why}"):
        load_config(config)
    with pytest.raises(ConfigError, match=f"s.yaml: strategies file is not valid YAML: {why}"):
        load_strategies(strategies)
    with pytest.raises(
        ConfigError, match=f"config.yaml: config is not valid YAML: {why}.*re-train"
    ):
        read_run_config(run)  # a run's own config.yaml, damaged
