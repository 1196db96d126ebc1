# The README's two commands: `make demo` and `make test`. Both install what they need first.
.PHONY: setup demo test lint

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/retrieval-gate demo

lint: setup
	.venv/bin/ruff check src tests scripts
	.venv/bin/ruff format --check src tests scripts
	.venv/bin/lint-imports

test: lint
	.venv/bin/python -m pytest
