# The commands a user needs. `make test` works on a fresh machine: it installs what is missing.
.PHONY: setup test test-quick lint demo docs docs-serve

setup:
	bash scripts/setup.sh

test:
	bash scripts/test.sh

# The inner loop: unit and contract tests, ruff and mypy (a few minutes).
test-quick:
	bash scripts/test.sh tests/unit tests/contract tests/test_code_quality.py

# The whole thing end to end: brokers, sample readings, Airflow and Dagster, Spark, Parquet
# (./demo-output). Options of scripts/demo.py go in DEMO_ARGS, e.g. DEMO_ARGS="--waves 3".
demo:
	bash scripts/setup.sh
	UV="uv"; command -v uv >/dev/null 2>&1 || UV="python3 -m uv"; \
	PATH="/usr/sbin:$$PATH" $$UV run --locked --all-packages python scripts/demo.py $(DEMO_ARGS)

lint:
	bash scripts/setup.sh
	uv run ruff check .
	uv run ruff format --check .
	uv run mypy

# The documentation site (docs/, mkdocs.yml) into ./site, strictly: a warning is an error.
docs:
	bash scripts/setup.sh
	UV="uv"; command -v uv >/dev/null 2>&1 || UV="python3 -m uv"; \
	NO_MKDOCS_2_WARNING=1 $$UV run --locked --all-packages mkdocs build --strict

# The site at http://127.0.0.1:8000, rebuilt as docs/ changes.
docs-serve:
	bash scripts/setup.sh
	UV="uv"; command -v uv >/dev/null 2>&1 || UV="python3 -m uv"; \
	NO_MKDOCS_2_WARNING=1 $$UV run --locked --all-packages mkdocs serve --dev-addr 127.0.0.1:8000
