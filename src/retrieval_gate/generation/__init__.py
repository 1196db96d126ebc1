"""Generators (vLLM, transformers), the paper prompts and model preparation."""
