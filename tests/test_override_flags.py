"""Repeated `KEY=VALUE` override flags keep every occurrence: argparse's `store` kept only the
last, so `--set run.name=new --set trainer.max_epochs=1 --overwrite` replaced the config's own
run. A verb's default overrides are replaced by the first occurrence, as before."""

from __future__ import annotations

from retrieval_gate.cli import build_parser


def _parse(argv: list[str]):
    return build_parser(argv).parse_args(argv)


def test_train_keeps_every_set() -> None:
    args = _parse(["train", "--config", "c.yaml", "--set", "run.name=new",
                   "--set", "trainer.max_epochs=1", "seed=3"])  # fmt: skip
    assert args.overrides == ["run.name=new", "trainer.max_epochs=1", "seed=3"]


def test_tune_s_first_set_replaces_its_defaults_and_later_ones_add() -> None:
    defaults = _parse(["tune", "--labels", "l.jsonl", "--gate", "learned"]).set
    assert defaults  # the CPU budget
    assert (
        _parse(["tune", "--labels", "l.jsonl", "--gate", "learned", "--set"]).set == []
    )  # dropped on a GPU
    both = _parse(
        ["tune", "--labels", "l.jsonl", "--gate", "learned", "--set", "a=1", "--set", "b=2"]
    ).set
    assert both == ["a=1", "b=2"]


def test_transfer_keeps_every_learned_set() -> None:
    args = _parse(
        ["transfer", "--labels", "l.jsonl", "--learned-set", "a=1", "--learned-set", "b=2"]
    )
    assert args.learned_set == ["a=1", "b=2"]
