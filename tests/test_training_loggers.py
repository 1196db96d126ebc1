"""`trainer.logger: csv | tensorboard | mlflow` through Lightning's own loggers: the real
TensorBoard and MLflow writers on a tiny run; an unknown name or a missing package is an error
naming the choices or the extra, before training starts."""

from __future__ import annotations

import importlib.util

import pytest

from retrieval_gate.errors import BackendError, ConfigError
from retrieval_gate.training import loggers
from tiny_backbones import synthetic_questions, tiny_backbone, tiny_config, write_label_file


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("loggers")
    qs, labels = synthetic_questions(48)
    model = tiny_backbone("roberta", root / "roberta", [q.text for q in qs])
    return root, qs, write_label_file(root / "labels.jsonl", labels), model


@pytest.mark.parametrize("kind", ["tensorboard", "mlflow"])
def test_logger_writes_beside_the_csv_log(tiny, train_gate, kind, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    root, qs, label_file, model = tiny
    cfg = tiny_config(label_file, root / "ck", "encoder", str(model), pooling="cls")
    run = train_gate(cfg.override(f"trainer.logger={kind}", f"run.name={kind}"), questions=qs)
    assert (run.path / "logs" / "metrics.csv").is_file()  # the run's own record stays
    if kind == "tensorboard":
        events = list((run.path / "logs" / "tensorboard").glob("events.out.tfevents.*"))
        assert events and events[0].stat().st_size > 0
    else:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=loggers.mlflow_store(run.path))
        found = client.search_runs([client.get_experiment_by_name("retrieval-gate").experiment_id])
        assert [r.info.run_name for r in found] == [kind]
        assert any(k.startswith("val/") for k in found[0].data.metrics)


def test_unknown_logger_is_refused_with_the_choices(tiny):
    root, _, label_file, model = tiny
    cfg = tiny_config(label_file, root / "ck", "encoder", str(model))
    with pytest.raises(ConfigError, match="csv, tensorboard, mlflow"):
        cfg.override("trainer.logger=wandb")


def test_missing_package_names_the_extra(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        loggers.importlib.util, "find_spec", lambda n, *a: None if n == "mlflow" else real(n, *a)
    )
    with pytest.raises(BackendError, match=r"retrieval-gate\[tracking\]"):
        loggers.build_loggers("mlflow", tmp_path, "run")
