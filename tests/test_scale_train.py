"""`retrieval-gate train` under torchrun (docs/scale.md): the real CLI launched as 2 gloo
ranks on CPU trains ONE DDP run (world size 2), written once; and the launcher's environment
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

from retrieval_gate.errors import ConfigError
from retrieval_gate.training.launch import launched_world, launcher_trainer


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


@pytest.mark.slow
def test_train_cli_under_torchrun_two_gloo_ranks(tmp_path):
    from tiny_backbones import synthetic_questions, tiny_backbone, tiny_config, write_label_file

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
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    cmd = [torchrun, "--standalone", "--nproc-per-node", "2", "-m", "retrieval_gate.cli",
           "train", "--config", str(tmp_path / "cfg.yaml")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [p for p in (tmp_path / "ck").iterdir() if p.is_dir()]
    assert [p.name for p in runs] == ["ddp"]  # one run folder
    run_dir = runs[0]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and 0.0 <= metrics["test"]["auroc"] <= 1.0
    assert len(list(run_dir.rglob("metrics.json"))) == 1 and not list(run_dir.rglob("*.tmp"))
    from retrieval_gate.training import load_run

    module, tokenizer, meta = load_run(run_dir)  # the saved weights load back
    assert sum(p.numel() for p in module.parameters()) == metrics["parameters"]
