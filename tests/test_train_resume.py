"""`train --resume` of a run folder: one moved or copied resumes from its own checkpoints, a
tuned threshold stays with the weights it was tuned on, and Ctrl-C is "interrupted"."""

from __future__ import annotations

import shutil
import signal
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch import nn

from conftest import scratch
from retrieval_gate.errors import DataError
from retrieval_gate.training import TrainConfig, read_metadata, save_threshold
from retrieval_gate.training.checkpoint import save_run
from retrieval_gate.training.heads import GradientHead
from retrieval_gate.training.trainer import prepare
from tiny_backbones import synthetic_questions, tiny_backbone, tiny_config, write_label_file

QUESTIONS, LABELS = synthetic_questions()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, request) -> Iterator[tuple[Path, str]]:
    """(label file, tiny RoBERTa folder): built in about a second, trained by no one here."""
    with scratch(tmp_path_factory, request, "train-resume") as root:
        labels = write_label_file(root / "labels.jsonl", LABELS)
        body = tiny_backbone("roberta", root / "roberta", [q.text for q in QUESTIONS])
        yield labels, str(body)


def _config(tiny: tuple[Path, str], out: Path, *overrides: str) -> TrainConfig:
    labels, body = tiny
    return tiny_config(labels, out, "encoder", body, pooling="cls").override(
        "run.name=x", *overrides
    )


def _weights(path: Path) -> dict[str, torch.Tensor]:
    state = torch.load(path, map_location="cpu", weights_only=False)
    return state.get("state_dict", state)


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_moved_or_copied_run_resumes_from_its_own_checkpoints(tmp_path, tiny, train_gate):
    """Lightning reloads only `best_model_path` when the checkpoint folder changed: a copied
    run's resume loaded the ORIGINAL folder's best.ckpt (retrained since: another run's
    weights in gate.pt), a moved one's failed on the path gone, and the first resumed epoch,
    a tie, became best-v1.ckpt beside a stray last-v1.ckpt. Nothing learns here after epoch 0
    (a learning rate too small to move a weight): every later epoch ties."""
    still = ("model.lr=1e-12", "model.head_lr=1e-12", "early_stopping.patience=10")
    first = train_gate(_config(tiny, tmp_path / "a", "trainer.max_epochs=2", *still),
                       questions=QUESTIONS)  # fmt: skip
    copy = tmp_path / "b" / "x"
    shutil.copytree(first.path, copy)
    train_gate(_config(tiny, tmp_path / "a"), questions=QUESTIONS, overwrite=True)  # other weights
    again = _config(tiny, tmp_path / "b", "trainer.max_epochs=3", *still)
    train_gate(again, questions=QUESTIONS, resume=True)
    ckpts = copy / "lightning"
    assert sorted(p.name for p in ckpts.iterdir()) == ["best.ckpt", "last.ckpt", "latest.ckpt"]
    assert torch.load(ckpts / "best.ckpt", weights_only=False)["epoch"] == 0  # ties kept it
    own = _weights(ckpts / "best.ckpt")
    assert _same(_weights(copy / "gate.pt"), own)
    assert not _same(own, _weights(first.path / "lightning" / "best.ckpt"))
    moved = tmp_path / "c" / "x"  # renamed: the folder it was trained in is gone
    copy.parent.rename(moved.parent)
    train_gate(_config(tiny, tmp_path / "c", "trainer.max_epochs=3", *still), questions=QUESTIONS,
               resume=True)  # fmt: skip
    assert _same(_weights(moved / "gate.pt"), own)


def test_a_moved_folders_checkpoint_state_is_read_as_its_own(tmp_path):
    """The checkpoint callbacks' state, saved in another folder, is mapped into this one: the
    kept best and its score survive (a tie does not replace it), without Lightning's warning;
    checkpoints written by Lightning's own callback restore into it and back."""
    from retrieval_gate.training.heads import RunCheckpoint  # new with the fix

    old, new = tmp_path / "old" / "lightning", tmp_path / "new" / "lightning"
    args = {"monitor": "val/auroc", "mode": "max", "save_top_k": 1, "save_last": True,
            "filename": "best"}  # fmt: skip
    saved = ModelCheckpoint(dirpath=old, **args)
    best = str(Path(saved.dirpath) / "best.ckpt")
    saved.best_k_models, saved.kth_best_model_path = {best: torch.tensor(0.9)}, best
    saved.best_model_path, saved.best_model_score = best, torch.tensor(0.9)
    saved.last_model_path = str(Path(saved.dirpath) / "last.ckpt")
    callback = RunCheckpoint(dirpath=new, **args)  # as the trainer builds it
    assert callback.state_key == saved.state_key
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "The dirpath has changed ..."
        callback.load_state_dict(saved.state_dict())
    here = Path(callback.dirpath)
    assert callback.best_model_path == callback.kth_best_model_path == str(here / "best.ckpt")
    assert callback.last_model_path == str(here / "last.ckpt")
    assert list(callback.best_k_models) == [str(here / "best.ckpt")]
    assert float(callback.best_model_score) == pytest.approx(0.9)
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)  # fmt: skip
    assert not callback.check_monitor_top_k(trainer, torch.tensor(0.9))  # a tie
    assert callback.check_monitor_top_k(trainer, torch.tensor(0.95))


class _Loaded:
    def load_state_dict(self, state: dict) -> None:
        self.state = state


def test_only_a_best_checkpoint_of_the_runs_own_folder_is_loaded(tmp_path):
    """A best path outside the run's lightning/ (another folder's, still there) was loaded
    into the run's gate.pt; now it is refused, naming the path and the fix."""
    other = tmp_path / "other" / "lightning" / "best.ckpt"
    other.parent.mkdir(parents=True)
    torch.save({"state_dict": {"w": torch.ones(1)}}, other)
    own = tmp_path / "run" / "lightning"
    kept = SimpleNamespace(best_model_path=str(other), dirpath=str(own))
    trainer = SimpleNamespace(checkpoint_callbacks=[kept], checkpoint_callback=kept,
                              interrupted=False, fit=lambda *a, **k: None)  # fmt: skip
    with pytest.raises(DataError, match=r"other/lightning/best\.ckpt.*not in.*--overwrite"):
        GradientHead().fit(trainer, _Loaded(), None, None, None)
    own.mkdir(parents=True)
    kept.best_model_path = str(own / "best.ckpt")  # this run's, deleted
    with pytest.raises(DataError, match="best.ckpt is gone"):
        GradientHead().fit(trainer, _Loaded(), None, None, None)


class _Stops(pl.LightningModule):
    """One linear layer whose first training step raises `stop`."""

    def __init__(self, stop: BaseException):
        super().__init__()
        self.layer, self.stop = nn.Linear(2, 1), stop

    def training_step(self, batch, batch_idx):  # noqa: ANN001, ANN201
        raise self.stop

    def configure_optimizers(self):  # noqa: ANN201
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):  # noqa: ANN201
        return torch.utils.data.DataLoader(torch.zeros(4, 2), batch_size=2)


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), SystemExit(3)], ids=["ctrl-c", "exit"])
def test_ctrl_c_in_training_is_an_interrupt_not_an_exit(tmp_path, stop):
    """Lightning caught Ctrl-C, exited 1 (the CLI's "interrupted", exit 130, never came) and
    left SIGINT ignored; an exit of another cause goes through as it was."""
    handler = signal.getsignal(signal.SIGINT)
    trainer = pl.Trainer(default_root_dir=tmp_path, max_epochs=1, logger=False,
                         enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    try:
        with pytest.raises(type(stop)) as raised:
            GradientHead().fit(trainer, _Stops(stop), None, None, None)
        assert signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, handler)
    if isinstance(stop, SystemExit):
        assert raised.value.code == 3


def test_a_tuned_threshold_goes_when_the_weights_change(tmp_path, tiny, caplog):
    """`tune --save-objective` records a threshold for the weights gate.pt holds; a resume
    that trained on kept it (and its objective, dev figures and date) beside other weights,
    and the export carried them. Saved again with the same weights, it stays."""
    config = _config(tiny, tmp_path)
    tokenizer, _, module = prepare(config, QUESTIONS)
    run = tmp_path / "x"
    provenance = {"path": None, "sha256": "0" * 64}
    save_run(run, config, module, tokenizer, provenance)
    save_threshold(run, 0.9, "macro-f1 (tuned)", {"macro_f1": 0.5})
    save_run(run, config, module, tokenizer, provenance)  # a resume that trained no epoch
    assert read_metadata(run)["threshold"] == 0.9
    with torch.no_grad():
        module.head[1].bias.add_(1.0)
    save_run(run, config, module, tokenizer, provenance)
    meta = read_metadata(run)
    assert (meta["threshold"], meta["objective"]) == (0.5, "default 0.5 (not tuned)")
    assert "dev_figures" not in meta and "tuned_at" not in meta
    assert "the tuned threshold was for the earlier weights: re-run tune" in caplog.text
