# The commands a user needs. `make test` works on a fresh machine: it installs what is missing.
.PHONY: setup test lint

setup:
	bash scripts/setup.sh

test:
	bash scripts/test.sh

lint:
	bash scripts/setup.sh
	uv run ruff check .
	uv run ruff format --check .
	uv run mypy
