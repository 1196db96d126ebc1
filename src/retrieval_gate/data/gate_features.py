"""What a gate's `features` input is made of: a user's columns (`features.SideFeatures`), or a
stacked head's text features (`text_features.TextFeatures`, which may carry side features and
the answer's confidence), and reading either back from a run or an export."""

from __future__ import annotations

from typing import Any

from .features import SideFeatures
from .text_features import TextFeatures

GateFeatures = SideFeatures | TextFeatures


def features_from_dict(d: dict[str, Any] | None) -> GateFeatures | None:
    """A run's or an export's stored features: side features, or a stacked head's text
    features (`"kind": "text"`)."""
    if d and d.get("kind") == "text":
        return TextFeatures.from_dict(d)
    return SideFeatures.from_dict(d)
