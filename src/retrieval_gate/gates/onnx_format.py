"""What an exported gate carries inside its ONNX file (metadata_props) and its file names.

Torch-free on purpose: `gates.onnx.OnnxGate` reads this in deployments without torch."""

from __future__ import annotations

# variant -> file name in export/<name>/: defined beside the manifest that lists them
from ..artifacts import VARIANTS  # noqa: F401

FORMAT = "retrieval-gate-onnx/2"
# Formats this version reads: /1 (binary gates, before routers) and /2, which adds the optional
# `router` key (a router's strategies, costs and budget calibration) and its second output.
READABLE_FORMATS = ("retrieval-gate-onnx/1", FORMAT)

# key -> what it means; every key is required: an ONNX file missing one is refused.
REQUIRED = {
    "format": f"always {FORMAT!r}",
    "classes": "JSON list: class index -> meaning (class 0 = no retrieval)",
    "score": "how the `scores` output is defined",
    "threshold": "retrieve iff score >= threshold",
    "threshold_objective": "what chose the threshold (tuning objective or the 0.5 default)",
    "max_length": "tokenizer truncation length used in training",
    "pad_token_id": "id used to pad input_ids (right padding)",
    "backbone": "encoder | t5-lora | decoder-lora",
    "model_name": "the backbone's model name or path",
    "label_provenance": "JSON: label file path, sha256, counts, generator/policy meta",
    "package_version": "retrieval-gate version that exported it",
    "variant": "fp32 | opt | int8 | fp16",
}

# Optional keys (format /2): present on a router's export only.
ROUTER_KEYS = {
    "router": "JSON `pricing.Calibration`: strategies in cost order, each strategy's cost, the "
    "dev calibration curve (price -> mean cost, accuracy), an optional one on the user's "
    "traffic, the default budget and price, and (issue 36) `specs`: each strategy's spec "
    "(`strategies.StrategySpec`: retriever, k, steps, prompt); an export without them names "
    "built-ins only",
}
# Outputs: `scores` (P(needs retrieval)) and `probs` (per class) for a binary or 3-way gate;
# a router's second output is `strategy_proba` (P(correct | strategy), one column a strategy).
ROUTER_OUTPUT = "strategy_proba"
