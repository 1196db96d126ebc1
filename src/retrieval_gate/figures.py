"""Headless matplotlib for every plot the package writes (reports and tuning)."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .outputs import write_owned  # noqa: E402

__all__ = ["panels", "plt", "save_figure"]


def panels(n: int, width: float = 7.0, height: float = 5.0):
    """A figure of `n` panels side by side (e.g. one per cost axis: retrievals, LLM calls)
    and its axes, as a list."""
    fig, axes = plt.subplots(1, n, figsize=(width * n, height), squeeze=False)
    return fig, list(axes[0])


def save_figure(fig, path: Path) -> Path:
    """Writes a PNG (creating its folder; never over a file retrieval-gate did not write:
    `outputs.write_owned`) and frees the figure."""
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    return write_owned(path, png.getvalue())
