"""The fenced code blocks of a Markdown file (README.md, every page of docs/), and a terminal
session that runs them as a user would.

A block may be preceded by one HTML comment (invisible on GitHub and on the site) that says how
it is run; ``docs-test`` and ``readme-test`` are the same directive:

- ``<!-- docs-test: save-as PATH -->``: the block is a file the text asks the user to save
  as ``PATH`` (relative to the working directory); the text before the comment must name it.
- ``<!-- docs-test: expect TEXT -->``: the block's output must contain ``TEXT``.
- ``<!-- docs-test: until TEXT -->``: the block's last command runs until stopped (a server):
  once its output shows ``TEXT`` (what the text before the block tells the user to wait for),
  the session presses Ctrl-C (SIGINT to the block's process group, as a terminal does), waits,
  and requires that every process the block started has stopped.

Every other block of a runnable language is run as written. Only ``text`` and ``mermaid``
blocks are not code; a file's content (``json``, ``yaml``) is allowed only with ``save-as``; a
block without a language, or in another language, is an error, so no block can be left out by
accident. A block indented under a content tab (``=== "pip"``, ``=== "uv"``) is a block like
any other: every tab's block runs, in the page's order.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

RUNNABLE = ("bash", "sh", "console", "python")
NOT_CODE = ("text", "mermaid")
FILES = ("json", "yaml")  # only as the content of a file the text asks the user to save
_FENCE = re.compile(r"^((?:    )*)```(\S*)\s*$")  # at the margin, or indented under a tab
_DIRECTIVE = re.compile(r"^<!--\s*(?:docs|readme)-test:\s*(save-as|expect|until)\s+(.+?)\s*-->$")


class BlockError(AssertionError):
    """A block failed, or the file breaks the rules above."""


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text and how to run it."""

    source: str  # the file's name, for messages
    line: int  # of the opening fence, 1-based
    section: str
    lang: str
    code: str
    directive: str | None = None
    argument: str = ""
    before: str = ""  # the prose just before the block (and its directive)

    @property
    def name(self) -> str:
        return f"{self.source}:{self.line} ({self.section}, {self.lang})"


def parse(text: str, source: str = "README.md") -> list[Block]:
    """Every fenced block of ``text`` (the file ``source``) in order, with its directive;
    checks the rules."""
    blocks: list[Block] = []
    lines = text.splitlines()
    section = "top"
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        fence = _FENCE.match(line)
        if not fence:
            index += 1
            continue
        indent = fence.group(1)
        end = next((j for j in range(index + 1, len(lines)) if lines[j] == f"{indent}```"), None)
        if end is None:
            raise BlockError(f"{source}:{index + 1}: the block is never closed")
        lang = fence.group(2)
        if lang not in RUNNABLE + NOT_CODE + FILES:
            raise BlockError(
                f"{source}:{index + 1} ({section}): a block in {lang or 'no language'!r}. "
                f"Tag it as one of {', '.join(RUNNABLE + NOT_CODE + FILES)}."
            )
        directive, argument, before_end = _directive(lines, index, source)
        prose = "\n".join(lines[max(0, before_end - 6) : before_end])
        blocks.append(
            Block(
                source=source,
                line=index + 1,
                section=section,
                lang=lang,
                code="\n".join(line.removeprefix(indent) for line in lines[index + 1 : end]) + "\n",
                directive=directive,
                argument=argument,
                before=prose,
            )
        )
        index = end + 1
    for block in blocks:
        _check(block)
    return blocks


def _directive(lines: list[str], fence: int, source: str) -> tuple[str | None, str, int]:
    """The directive on the line before ``fence`` (if any), and where the prose before ends."""
    previous = lines[fence - 1].strip() if fence > 0 else ""
    if "readme-test" in previous or "docs-test" in previous:
        match = _DIRECTIVE.match(previous)
        if match is None:
            raise BlockError(f"{source}:{fence}: cannot read the directive {previous!r}")
        return match.group(1), match.group(2), fence - 1
    return None, "", fence


def _check(block: Block) -> None:
    if block.lang in FILES and block.directive != "save-as":
        raise BlockError(f"{block.name}: a {block.lang} block must be a file to save (save-as)")
    if block.directive is None:
        return
    if block.lang in NOT_CODE:
        raise BlockError(f"{block.name}: a directive on a block that is not code")
    if block.directive == "save-as" and f"`{block.argument}`" not in block.before:
        raise BlockError(
            f"{block.name}: the text before the block must tell the user to save it as "
            f"`{block.argument}`"
        )
    if block.directive == "until" and block.lang not in ("bash", "sh"):
        raise BlockError(f"{block.name}: 'until' is for shell blocks")
    if block.directive == "until" and block.argument not in block.before:
        raise BlockError(
            f"{block.name}: the text before the block must tell the user to look for "
            f"{block.argument!r}"
        )


@dataclass
class Session:
    """One terminal: a working directory and the exported environment, carried from block
    to block (a block's ``export`` and ``cd`` hold for the blocks after it)."""

    cwd: Path
    env: dict[str, str]
    scratch: Path  # outside cwd: the scripts and the environment dumps

    def run(self, block: Block, timeout: float) -> str:
        """Run ``block`` as its directive says; return its output (stdout and stderr)."""
        if block.lang in NOT_CODE:
            return ""
        if block.directive == "save-as":
            target = self.cwd / block.argument
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code)
            return ""
        if block.lang == "python":
            script = self.scratch / f"block_{block.line}.py"
            script.write_text(block.code)
            output = self._wait(block, [self.env_python, str(script)], timeout)
        elif block.directive == "until":
            output = self._until(block, timeout)
        else:
            output = self._wait(block, ["bash", str(self._shell_script(block))], timeout)
            self._load_state()
        if block.directive == "expect" and block.argument not in output:
            raise BlockError(f"{block.name}: the output lacks {block.argument!r}:\n{output}")
        return output

    @property
    def env_python(self) -> str:
        """``python`` as the user's shell finds it (the first on their PATH)."""
        for folder in self.env["PATH"].split(os.pathsep):
            candidate = Path(folder) / "python"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
        return sys.executable

    def _shell_script(self, block: Block) -> Path:
        code = block.code
        if block.lang == "console":  # the commands are the lines after a '$ ' prompt
            code = "\n".join(line[2:] for line in code.splitlines() if line.startswith("$ "))
        script = self.scratch / f"block_{block.line}.sh"
        state = shlex.quote(str(self.scratch))
        script.write_text(
            f"set -eo pipefail\ncd {shlex.quote(str(self.cwd))}\n{code}\n"
            f"env -0 > {state}/env\npwd > {state}/cwd\n"
        )
        return script

    def _load_state(self) -> None:
        dump = (self.scratch / "env").read_bytes().split(b"\0")
        pairs = (entry.decode().split("=", 1) for entry in dump if b"=" in entry)
        skip = ("PWD", "OLDPWD", "SHLVL", "_")
        self.env = {key: value for key, value in pairs if key not in skip}
        self.cwd = Path((self.scratch / "cwd").read_text().strip())

    def _start(self, argv: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            argv,
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=_default_signals,
        )

    def _wait(self, block: Block, argv: list[str], timeout: float) -> str:
        proc = self._start(argv)
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            output, _ = proc.communicate()
            raise BlockError(f"{block.name} ran over {timeout:.0f} s:\n{output}") from None
        if proc.returncode != 0:
            raise BlockError(f"{block.name} exited {proc.returncode}:\n{_tail(output)}")
        return output

    def _until(self, block: Block, timeout: float) -> str:
        """Run the block until its output shows the text, then Ctrl-C it: all must stop."""
        log = self.scratch / f"block_{block.line}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(
                ["bash", str(self._shell_script(block))],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_default_signals,
            )
        deadline = time.monotonic() + timeout
        try:
            while block.argument not in log.read_text(errors="replace"):
                if proc.poll() is not None:
                    raise BlockError(
                        f"{block.name} exited {proc.returncode} before it showed "
                        f"{block.argument!r}:\n{_tail(log.read_text())}"
                    )
                if time.monotonic() > deadline:
                    raise BlockError(
                        f"{block.name}: no {block.argument!r} after {timeout:.0f} s:\n"
                        f"{_tail(log.read_text())}"
                    )
                time.sleep(0.5)
            left = interrupt(proc, grace=30.0)
            if left:
                raise BlockError(
                    f"{block.name}: after Ctrl-C and 30 s these processes still ran (killed "
                    f"now): {left}\n{_tail(log.read_text())}"
                )
        finally:
            _kill_group(proc)
        return log.read_text()


def interrupt(proc: subprocess.Popen[Any], grace: float) -> list[str]:
    """Ctrl-C as a terminal sends it: SIGINT to ``proc``'s process group. Waits up to
    ``grace`` s for every process the block started (also any that left the group) and
    returns those still running."""
    try:
        started = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        started = []
    os.killpg(proc.pid, signal.SIGINT)
    deadline = time.monotonic() + grace
    alive: list[psutil.Process] = []
    while time.monotonic() < deadline:
        proc.poll()
        alive = [p for p in started if _alive(p)]
        if proc.returncode is not None and not alive:
            return []
        time.sleep(0.2)
    left = [f"{p.pid} {' '.join(_cmdline(p))[:120]}" for p in alive]
    for p in alive:
        p.kill()
    return left


def _alive(process: psutil.Process) -> bool:
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def running(pid: int) -> bool:
    """Whether ``pid`` runs (an exited process nobody has reaped yet does not)."""
    try:
        return _alive(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return False


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return [str(part) for part in process.cmdline()]
    except psutil.Error:
        return ["?"]


def _default_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _tail(output: str, lines: int = 60) -> str:
    return "\n".join(output.splitlines()[-lines:])


PIP_SHIM = '''\
#!{python}
"""`pip` for the docs tests: `pip install ./core ...` must name projects of this clone that
the workspace venv already has, installed from exactly there (editable); nothing else runs."""
import json, sys, tomllib
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

args = sys.argv[1:]
if not args or args[0] != "install" or any(a.startswith("-") for a in args[1:]):
    sys.exit(f"docs-test pip: only 'pip install PATH...' is supported, got {{args}}")
for arg in args[1:]:
    where, _, extras = arg.partition("[")
    path = Path(where).resolve()
    project = path / "pyproject.toml"
    if not project.is_file():
        sys.exit(f"docs-test pip: {{arg}} is not a project (no pyproject.toml)")
    meta = tomllib.loads(project.read_text())["project"]
    name = meta["name"]
    for extra in filter(None, extras.rstrip("]").split(",")):
        if extra.strip() not in meta.get("optional-dependencies", {{}}):
            sys.exit(f"docs-test pip: {{name}} has no extra {{extra!r}}")
    try:
        url = json.loads(distribution(name).read_text("direct_url.json") or "{{}}").get("url")
    except PackageNotFoundError:
        sys.exit(f"docs-test pip: {{name}} is not installed in the venv (uv sync --all-packages)")
    if url != path.as_uri():
        sys.exit(f"docs-test pip: {{name}} is installed from {{url}}, not from {{path}}")
    print(f"{{name}} is installed from {{path}} (editable)")
'''


def write_pip_shim(folder: Path, python: str) -> None:
    """Put the ``pip`` of :data:`PIP_SHIM` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("pip", "pip3"):
        shim = folder / name
        shim.write_text(PIP_SHIM.format(python=python))
        shim.chmod(0o755)


UV_SHIM = '''\
#!{python}
"""`uv` for the docs tests: `uv sync --all-packages` checks that the workspace venv (the
clone's .venv) is in sync with the lock file, changing nothing: `uv sync --check`."""
import os, subprocess, sys

args = sys.argv[1:]
allowed = {{"--all-packages", "--locked"}}
if args[:1] != ["sync"] or "--all-packages" not in args or set(args[1:]) - allowed:
    sys.exit(f"docs-test uv: only 'uv sync --all-packages' is supported, got {{args}}")
check = [{uv!r}, "sync", "--all-packages", "--locked", "--check", "--inexact", "--offline"]
env = {{**os.environ, "UV_PROJECT_ENVIRONMENT": {venv!r}}}
sys.exit(subprocess.run(check, env=env, check=False).returncode)
'''


def write_uv_shim(folder: Path, python: str, uv: str, venv: Path) -> None:
    """Put the ``uv`` of :data:`UV_SHIM` in ``folder``: it checks ``venv`` with ``uv``."""
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "uv"
    shim.write_text(UV_SHIM.format(python=python, uv=uv, venv=str(venv)))
    shim.chmod(0o755)


def clean_environment(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without what the test run or other tests set for Airflow, Dagster, Spark or
    the Sluice examples: the page must say everything the user sets."""
    dropped = ("AIRFLOW", "DAGSTER", "SLUICE_", "PYTEST", "PYTHONPATH", "VIRTUAL_ENV", "SPARK")
    return {k: v for k, v in base.items() if not k.startswith(dropped)}
