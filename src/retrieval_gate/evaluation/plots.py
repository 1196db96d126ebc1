"""The PNG plots of the reports (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from sklearn.metrics import precision_recall_curve, roc_curve

from .. import metrics as M
from ..figures import plt, save_figure


def roc_pr(y: np.ndarray, scores: Mapping[str, np.ndarray], title: str, path: Path) -> Path:
    """ROC and precision-recall curves of every gate on one figure."""
    fig, (roc, pr) = plt.subplots(1, 2, figsize=(12, 5))
    drawn = False
    for name, s in scores.items():
        auc, ap = M.auroc(y, s), M.average_precision(y, s)
        if auc is None:
            continue
        drawn = True
        fpr, tpr, _ = roc_curve(y, s)
        roc.plot(fpr, tpr, label=f"{name} (AUROC {auc:.3f})")
        prec, rec, _ = precision_recall_curve(y, s)
        pr.plot(rec, prec, label=f"{name} (AP {ap:.3f})")
    roc.plot([0, 1], [0, 1], "k:", lw=0.8)
    roc.set(xlabel="false positive rate", ylabel="true positive rate", title=f"ROC: {title}")
    pr.axhline(float(np.mean(y)), color="k", ls=":", lw=0.8)
    pr.set(xlabel="recall (needs retrieval)", ylabel="precision", title=f"PR: {title}")
    if drawn:  # a split of one class has no curve to name
        roc.legend(fontsize=8)
        pr.legend(fontsize=8)
    else:
        roc.set_title(f"ROC: {title} (one class: no curve)")
    return save_figure(fig, path)


def reliability(y: np.ndarray, scores: Mapping[str, np.ndarray], title: str, path: Path) -> Path:
    """Reliability diagram per gate: observed share needing retrieval vs predicted P."""
    n = len(scores)
    cols = min(n, 4)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.2 * rows), squeeze=False)
    for ax, (name, s) in zip(axes.flat, scores.items(), strict=False):
        pred, true, count = M.reliability(y, s)
        ax.plot([0, 1], [0, 1], "k:", lw=0.8)
        ax.scatter(pred, true, s=10 + 200 * count / count.sum())
        ax.plot(pred, true)
        ax.set(title=f"{name}\nECE {M.ece(y, s):.3f}", xlim=(0, 1), ylim=(0, 1))
        ax.set_xlabel("predicted P(needs retrieval)", fontsize=8)
        ax.set_ylabel("observed share", fontsize=8)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(title)
    return save_figure(fig, path)


def heatmap(
    values: np.ndarray, rows: Sequence[str], cols: Sequence[str], title: str, path: Path
) -> Path:
    """A matrix with NaN cells shown as n/a (e.g. AUROC on a single-class source)."""
    fig, ax = plt.subplots(figsize=(1.3 * len(cols) + 3, 0.6 * len(rows) + 2))
    im = ax.imshow(np.ma.masked_invalid(values), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    for i in range(len(rows)):
        for j in range(len(cols)):
            v = values[i, j]
            text = "n/a" if np.isnan(v) else f"{v:.2f}"
            ax.text(j, i, text, ha="center", va="center", color="w" if v < 0.6 else "k")
    fig.colorbar(im, ax=ax)
    ax.set_title(title)
    return save_figure(fig, path)


def mallen(
    s_pop: np.ndarray,
    closed: np.ndarray,
    rag: np.ndarray,
    decisions: Mapping[str, np.ndarray],
    path: Path,
    n_bins: int = 8,
    feature: str = "s_pop",
) -> Path:
    """Accuracy vs subject popularity (Mallen et al.'s figure): closed-book, always-retrieve
    and each gate's adaptive accuracy per log-popularity bin; `feature`: the signal `s_pop`
    holds (--feature), on a linear axis where it goes below 0 (no log scale there)."""
    edges = np.unique(np.quantile(s_pop, np.linspace(0, 1, n_bins + 1)))
    bins = np.clip(np.searchsorted(edges, s_pop, side="right") - 1, 0, len(edges) - 2)
    log_x = bool((s_pop >= 0).all())
    centres = np.array(
        [np.sqrt(max(edges[b], 1) * max(edges[b + 1], 1)) if log_x
         else (edges[b] + edges[b + 1]) / 2 for b in range(len(edges) - 1)]
    )  # fmt: skip
    series = {"closed-book": closed, "always retrieve": rag}
    series |= {f"adaptive: {k}": np.where(d, rag, closed) for k, d in decisions.items()}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, v in series.items():
        acc = [v[bins == b].mean() if (bins == b).any() else np.nan for b in range(len(centres))]
        ax.plot(centres, acc, marker="o", label=name, ls="--" if name == "closed-book" else "-")
    if log_x:
        ax.set_xscale("log")
    if feature == "s_pop":
        ax.set(xlabel="subject popularity s_pop (monthly page views, bin centre)")
        ax.set_title(f"PopQA accuracy vs popularity ({len(s_pop)} questions)")
    else:
        ax.set(xlabel=f"{feature} (--feature, bin centre)")
        ax.set_title(f"accuracy vs {feature} ({len(s_pop)} questions)")
    ax.set(ylabel="accuracy")
    ax.legend(fontsize=8)
    return save_figure(fig, path)
