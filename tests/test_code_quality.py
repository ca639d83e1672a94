"""The code stays ruff- and mypy-clean: CI runs the linters as part of the test suite."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "command",
    [["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy"]],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_linter_is_clean(command: list[str]) -> None:
    result = subprocess.run(
        [str(BIN / command[0]), *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, (
        f"{' '.join(command)} found problems:\n{result.stdout}{result.stderr}"
    )


def _testing_imports(path: Path, package: str) -> list[str]:
    """The imports of ``sluice.testing`` in the module at ``path`` (of ``package``, for its
    relative imports), and the strings that name a module of it (``python -m ...``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}".rstrip(".")
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.fullmatch(r"sluice\.testing(\.\w+)*", node.value)
        ):
            names = [node.value]
        found += [
            f"{path.relative_to(ROOT)}:{node.lineno}: {name}"  # type: ignore[attr-defined]
            for name in names
            if name == "sluice.testing" or name.startswith("sluice.testing.")
        ]
    return found


def test_no_module_outside_sluice_testing_imports_it() -> None:
    """Production code never needs the test package (the ``sluice`` command once imported
    its stand-in Schema Registry); the providers neither."""
    roots = [ROOT / "core" / "src", *(ROOT / "providers").glob("*/src")]
    offenders = []
    checked = 0
    for root in roots:
        for path in root.rglob("*.py"):
            module = ".".join(path.relative_to(root).with_suffix("").parts)
            if module == "sluice.testing" or module.startswith("sluice.testing."):
                continue
            package = module if path.name == "__init__.py" else module.rpartition(".")[0]
            package = package.removesuffix(".__init__")
            offenders += _testing_imports(path, package)
            checked += 1
    assert checked > 100, f"only {checked} modules found under {roots}"
    assert not offenders, "imports of sluice.testing outside it:\n" + "\n".join(offenders)


def test_the_old_registry_module_still_imports_with_a_deprecation_warning() -> None:
    import importlib
    import sys as system

    system.modules.pop("sluice.testing.schema_registry", None)
    with pytest.warns(DeprecationWarning, match="sluice.registry_server"):
        old = importlib.import_module("sluice.testing.schema_registry")
    from sluice.registry_server import start_schema_registry

    assert old.start_schema_registry is start_schema_registry
