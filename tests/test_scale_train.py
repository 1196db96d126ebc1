"""`retrieval-gate train` under torchrun (docs/scale.md): the real CLI launched as 2 gloo
ranks on CPU trains ONE DDP run (world size 2), written once, with one process's figures and
every rank's examples; its rank zero locks the run folder; and the launcher's environment
(torchrun, SLURM's srun) fills the Trainer's devices, nodes and strategy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from retrieval_gate.errors import ConfigError, InputError
from retrieval_gate.training.launch import launched_world, launcher_trainer, rank_zero
from retrieval_gate.training.trainer import one_trainer


def test_launcher_environment_sets_devices_nodes_and_ddp():
    torchrun = {"TORCHELASTIC_RUN_ID": "x", "LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "8"}
    slurm = {"SLURM_NTASKS": "8", "SLURM_NNODES": "2", "SLURM_JOB_NAME": "train"}
    auto = {"devices": "auto", "strategy": "auto", "max_epochs": 1}
    assert launched_world({}) is None and launcher_trainer(auto, {}) == auto
    assert launched_world({**slurm, "SLURM_JOB_NAME": "bash"}) is None  # an interactive shell
    for env in (torchrun, slurm):
        assert launcher_trainer(auto, env, cuda_devices=0) == {
            **auto,
            "devices": 4,
            "num_nodes": 2,
            "strategy": "ddp",
        }
    with pytest.raises(ConfigError, match="4 process\\(es\\) per node on 2 node\\(s\\)"):
        launcher_trainer({**auto, "devices": 2}, torchrun, cuda_devices=0)


def test_more_ranks_on_a_node_than_its_gpus_are_refused_before_training():
    torchrun = {"TORCHELASTIC_RUN_ID": "x", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2"}
    auto = {"devices": "auto", "strategy": "auto", "accelerator": "auto"}
    with pytest.raises(ConfigError, match="2 processes on this node, but each sees 1 GPU.*"
                       "--nproc-per-node.*--gpus-per-node.*trainer.accelerator=cpu"):  # fmt: skip
        launcher_trainer(auto, torchrun, cuda_devices=1)
    assert launcher_trainer(auto, torchrun, cuda_devices=2)["devices"] == 2  # one GPU a rank
    assert launcher_trainer(auto, torchrun, cuda_devices=0)["devices"] == 2  # CPU ranks
    cpu = launcher_trainer({**auto, "accelerator": "cpu"}, torchrun, cuda_devices=1)
    assert cpu["devices"] == 2 and cpu["strategy"] == "ddp"  # gloo ranks beside one GPU


RANK_ENV = ("TORCHELASTIC_RUN_ID", "LOCAL_WORLD_SIZE", "WORLD_SIZE", "RANK", "LOCAL_RANK",
            "GROUP_RANK", "NODE_RANK", "SLURM_NTASKS", "SLURM_PROCID")  # fmt: skip


def test_rank_zero_of_each_launcher_is_read_from_its_environment():
    torchrun = {"TORCHELASTIC_RUN_ID": "x", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4"}
    slurm = {"SLURM_NTASKS": "4", "SLURM_NNODES": "2", "SLURM_JOB_NAME": "train"}
    assert rank_zero({}) and rank_zero({"LOCAL_RANK": "0", "NODE_RANK": "0"})  # Lightning's own
    assert not rank_zero({"LOCAL_RANK": "1"}) and not rank_zero({"NODE_RANK": "1"})
    # torchrun: its global RANK, whichever node (rendezvous order) holds it
    assert rank_zero({**torchrun, "RANK": "0", "LOCAL_RANK": "0", "NODE_RANK": "1"})
    assert not rank_zero({**torchrun, "RANK": "2", "LOCAL_RANK": "0", "GROUP_RANK": "1"})
    assert rank_zero({**slurm, "SLURM_PROCID": "0"})
    assert not rank_zero({**slurm, "SLURM_PROCID": "3"})


def test_torchrun_rank_zero_locks_the_run_folder_for_all_its_ranks(tmp_path, monkeypatch):
    """No rank of a torchrun job took the run folder's lock, so a second `train
    --overwrite` of the same run deleted lightning/ under the running job. Its rank zero holds
    the lock, as a single process does; its other ranks share the folder."""

    def environment(**env: str) -> None:
        for name in RANK_ENV:
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)

    def torchrun(rank: int) -> None:  # what torchrun --nproc-per-node 2 gives rank `rank`
        environment(TORCHELASTIC_RUN_ID="x", LOCAL_WORLD_SIZE="2", WORLD_SIZE="2",
                    RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0")  # fmt: skip

    run_dir = tmp_path / "ck" / "T"
    busy = rf"another training run \(pid {os.getpid()}\) is writing the run folder T"
    torchrun(0)
    with one_trainer(run_dir):
        torchrun(1)
        with one_trainer(run_dir):  # the job's other rank
            pass
        environment()  # a plain `retrieval-gate train` of the same run
        with pytest.raises(InputError, match=busy):
            with one_trainer(run_dir):
                pass
        torchrun(0)  # rank zero of a second torchrun job
        with pytest.raises(InputError, match=busy):
            with one_trainer(run_dir):
                pass
    environment()
    with one_trainer(run_dir):  # released with the job
        pass


def train_under_torchrun(config: Path, *args: str) -> None:
    """`retrieval-gate train --config config *args` as 2 gloo ranks of torchrun."""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    cmd = [torchrun, "--standalone", "--nproc-per-node", "2", "-m", "retrieval_gate.cli",
           "train", "--config", str(config), *args]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=config.parent,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def torchrun_run(tmp_path_factory):
    """(run folder, config) of the real CLI trained by torchrun as 2 gloo ranks on CPU."""
    from tiny_backbones import synthetic_questions, tiny_backbone, tiny_config, write_label_file

    tmp_path = tmp_path_factory.mktemp("torchrun")
    questions, labels = synthetic_questions(96, seed=3)
    qfile = tmp_path / "questions.jsonl"
    qfile.write_text("".join(json.dumps({"id": q.id, "question": q.text, "answers": list(q.answers)}) + "\n"
                             for q in questions))  # fmt: skip
    model = tiny_backbone("roberta", tmp_path / "model", [q.text for q in questions])
    cfg = tiny_config(write_label_file(tmp_path / "labels.jsonl", labels), tmp_path / "ck",
                      "encoder", str(model), pooling="cls")  # fmt: skip
    # CPU ranks on every machine (on a one-GPU machine, auto would give both ranks to CUDA)
    cfg = cfg.override("run.name=ddp", f"data.questions={qfile}", "trainer.limit_train_batches=2",
                       "trainer.accelerator=cpu")  # fmt: skip
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    train_under_torchrun(tmp_path / "cfg.yaml")
    runs = [p for p in (tmp_path / "ck").iterdir() if p.is_dir()]
    assert [p.name for p in runs] == ["ddp"]  # one run folder
    return runs[0], cfg


@pytest.mark.slow
def test_train_cli_under_torchrun_two_gloo_ranks(torchrun_run):
    run_dir, _ = torchrun_run
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and 0.0 <= metrics["test"]["auroc"] <= 1.0
    assert len(list(run_dir.rglob("metrics.json"))) == 1 and not list(run_dir.rglob("*.tmp"))
    from retrieval_gate.training import load_run

    module, tokenizer, meta = load_run(run_dir)  # the saved weights load back
    assert sum(p.numel() for p in module.parameters()) == metrics["parameters"]


@pytest.mark.slow
def test_ddp_metrics_are_one_process_figures_and_count_every_rank(torchrun_run):
    """Under DDP metrics.json scored dev and test through Lightning's DistributedSampler,
    which pads a split to a multiple of the ranks by repeating questions (15 test questions
    scored as 16), and the epochs' example counts were rank zero's alone (half of 2 ranks)."""
    import pytorch_lightning as pl

    from retrieval_gate.training import load_run
    from retrieval_gate.training.datamodule import GateDataModule

    run_dir, cfg = torchrun_run
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["splits"]["test"]["n"] % 2 == 1  # 2 ranks: padded by a repeated question
    module, tokenizer, _ = load_run(run_dir)
    dm = GateDataModule(tokenizer, cfg.data, cfg.run.seed)
    module.loss = module.task.loss(dm.class_weights())  # training's loss (load_run: unweighted)
    one = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    for split, stage, read in (("test", "test", one.test), ("dev", "val", one.validate)):
        alone = {k.removeprefix(f"{stage}/"): v for k, v in
                 read(module, datamodule=dm, verbose=False)[0].items()}  # fmt: skip
        assert metrics[split] == pytest.approx(alone, abs=1e-5), split
    # 2 ranks x trainer.limit_train_batches=2 x data.batch_size=16
    (epoch,) = metrics["epochs"]
    assert epoch["examples"] == 2 * 2 * 16
    assert epoch["examples_per_s"] == pytest.approx(epoch["examples"] / epoch["train_seconds"])


@pytest.mark.slow
def test_torchrun_resume_keeps_the_epochs_log_once(torchrun_run, tmp_path):
    """Every rank carried logs/metrics.csv into the history a resume merges back, so under
    torchrun the second rank carried it again and the epochs before the resume were logged
    twice: rank zero alone prepares the run folder."""
    import csv

    run_dir, _ = torchrun_run
    out = tmp_path / "ck"
    shutil.copytree(run_dir, out / run_dir.name)  # a moved run resumes (its place is not hashed)
    log = out / run_dir.name / "logs" / "metrics.csv"
    before = [r["epoch"] for r in csv.DictReader(log.open())]
    train_under_torchrun(run_dir.parent.parent / "cfg.yaml", "--set", f"run.output_dir={out}",
                         "trainer.max_epochs=2", "--resume")  # fmt: skip
    after = [r["epoch"] for r in csv.DictReader(log.open())]
    assert after[: len(before)] == before and "0" not in after[len(before) :], after
