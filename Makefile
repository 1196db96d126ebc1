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

# The suite on up to 4 workers (pytest-xdist, one thread each): a module's tests stay on one
# worker, and so do the vLLM engine's (tests/conftest.py). TEST_WORKERS=1 runs them in turn.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)

# A fresh install skips setup.sh's import check here (14 s on 2 cores): the suite imports it all.
test: export RG_IMPORT_CHECK := 0
test: lint
	@bash scripts/setup_postgres.sh
	.venv/bin/python -m pytest -n $(TEST_WORKERS) --dist loadgroup
