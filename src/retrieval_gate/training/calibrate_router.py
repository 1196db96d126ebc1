"""A router's training epilogue (task `strategies`): its P(correct | strategy) on dev (or, for a
stacked head fitted on train and dev, its out-of-fold predictions of those questions), the price
of its default budget calibrated there (`pricing.Calibration`, stored in the run's
metadata.json, so a trained router answers any budget before `tune` runs), and its accuracy and
mean cost at that operating point, on the calibration questions and on test, for metrics.json
and the model card."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .. import metrics as M
from ..pricing import Calibration, outcome, route_indices
from ..strategies import StrategyRegistry
from .config import TrainConfig
from .datamodule import GateDataModule
from .module import RetrievalGateModule
from .stacked import OutOfFold


def router_costs(config: TrainConfig, dm: GateDataModule) -> tuple[float, ...]:
    """The router's strategy costs (`TrainConfig.router_costs`) for this data module."""
    ids = [row[0] for row in dm.rows["train"]]
    return config.router_costs(dm.strategies, dm.question_costs, ids)


@torch.inference_mode()
def split_probabilities(
    module: RetrievalGateModule, dm: GateDataModule, split: str
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(ids, P(correct | strategy), recorded correctness) of one split, in its row order."""
    module.eval()
    device = next(module.parameters()).device

    def probabilities(batch: dict[str, Any]) -> np.ndarray:
        feats = batch.get("features")
        logits = module(batch["input_ids"].to(device), batch["attention_mask"].to(device),
                        None if feats is None else feats.to(device))  # fmt: skip
        return module.probabilities(logits).float().cpu().numpy()

    rows = dm.rows[split]
    probs = dm.in_row_order(split, probabilities)
    return [r[0] for r in rows], probs, np.array([r[-1] for r in rows], float)


def _paid(dm: GateDataModule, ids: list[str], costs: tuple[float, ...]) -> np.ndarray:
    return np.array([dm.question_costs.get(i, costs) for i in ids], float)


def out_of_fold_metrics(out_of_fold: OutOfFold, split: str, threshold: float) -> dict[str, float]:
    """The binary view's figures (as validation reports them, but the loss) of one fitted
    split from its out-of-fold predictions: a split the head was fitted on scores in-sample."""
    rows = np.array([s == split for s in out_of_fold.splits])
    y, p = 1 - out_of_fold.Y[rows, 0], 1 - out_of_fold.P[rows, 0]
    d = (p >= threshold).astype(int)
    return {"acc": M.accuracy(y, d), "macro_f1": M.macro_f1(y, d), "auroc": M.auroc(y, p),
            "ap": M.average_precision(y, p), "ece": M.ece(y, p), "retrieval_rate": M.retrieval_rate(d),
            "out_of_fold": 1.0}  # fmt: skip


def calibration_rows(
    module: RetrievalGateModule, dm: GateDataModule, out_of_fold: OutOfFold | None
) -> tuple[str, list[str], np.ndarray, np.ndarray]:
    """(what they are, ids, P, recorded correctness) of the questions the price is read on:
    dev, or the out-of-fold predictions of the questions a stacked head was fitted on."""
    if out_of_fold is None:
        return ("dev", *split_probabilities(module, dm, "dev"))
    o = out_of_fold
    return (f"out-of-fold {'+'.join(dict.fromkeys(o.splits))}", o.ids, o.P, o.Y)


def calibrate_router(
    module: RetrievalGateModule,
    dm: GateDataModule,
    config: TrainConfig,
    out_of_fold: OutOfFold | None = None,
) -> Calibration:
    costs = router_costs(config, dm)
    source, ids, P, Y = calibration_rows(module, dm, out_of_fold)
    return Calibration.fit(dm.strategies, costs, P, Y, _paid(dm, ids, costs), config.model.budget,
                           source, _specs(config, dm))  # fmt: skip


def _specs(config: TrainConfig, dm: GateDataModule) -> StrategyRegistry | None:
    """The specs a router carries: the config's, else the built-ins' where its strategies
    are built-ins (a label file's own names carry none: an export then names them only)."""
    registry = config.registry()
    return registry if all(s in registry for s in dm.strategies) else None


def router_figures(
    module: RetrievalGateModule,
    dm: GateDataModule,
    cal: Calibration,
    out_of_fold: OutOfFold | None = None,
) -> dict[str, Any]:
    """Accuracy, mean cost and routing shares at the default operating point on the
    calibration questions (dev, or out-of-fold) and on test, and AUROC of "the no-retrieval
    answer is wrong"."""
    out: dict[str, Any] = {"strategies": list(cal.strategies), "costs": list(cal.costs),
                           "default_budget": cal.default_budget, "objective": cal.objective}  # fmt: skip
    parts = [
        calibration_rows(module, dm, out_of_fold),
        ("test", *split_probabilities(module, dm, "test")),
    ]
    for split, ids, P, Y in parts:
        choice = route_indices(P, cal.default_price, cal.costs)
        ok, paid = outcome(choice, Y, _paid(dm, ids, cal.costs))
        shares = np.bincount(choice, minlength=len(cal.strategies)) / len(choice)
        out[split] = {"n": len(ids), "accuracy": float(ok.mean()), "mean_cost": float(paid.mean()),
                      "auroc_no_retrieval_wrong": M.auroc(1 - Y[:, 0], 1 - P[:, 0]),
                      "shares": dict(zip(cal.strategies, shares.tolist(), strict=True))}  # fmt: skip
    return out
