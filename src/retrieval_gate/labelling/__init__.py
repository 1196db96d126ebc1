"""Labelling that runs the RAG loop: `label --policy strategies` (each question under every
strategy of the loop). It sits above both `labels/` (label files, judging, the policy
registry) and `rag/` (the loop), and registers its `PolicySpec` into the one registry
(`labels.policy_registry.POLICIES`) when imported: import this package to get every policy."""

from ..labels.policy_registry import POLICIES, policy_spec
from . import strategies_policy  # noqa: F401  (registers --policy strategies)

__all__ = ["POLICIES", "policy_spec"]
