"""The README's examples and the modules' docstring examples run."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fakeshard

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_example_of_a_page_runs(page):
    """Each page's examples run in order, in a namespace of the page's own."""
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for block in blocks:
        exec(compile(block, str(page.relative_to(ROOT)), "exec"), namespace)


def test_the_docs_have_examples():
    counts = {p.relative_to(ROOT).as_posix(): len(re.findall(r"```python\n", p.read_text(encoding="utf-8")))
              for p in DOCS}
    assert counts["README.md"] >= 1 and counts["docs/tutorial.md"] >= 5, counts


def test_readme_starts_with_the_two_commands_and_ci_runs_the_test_one():
    commands = re.findall(r"```sh\n(.*?)\n```", README, flags=re.S)[:2]
    assert "fakeshard check" in commands[0]
    assert "pytest" in commands[1]
    # CI runs both as written: it prints each block with .ci/readme_command.py and runs it.
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r'^bash -euo pipefail -c "\$\(readme 1\)"$', ci, flags=re.M)
    assert re.search(r'^bash -euo pipefail -c "\$\(readme 2\)"$', ci, flags=re.M)
    for n, command in enumerate(commands, start=1):
        printed = subprocess.run([sys.executable, str(ROOT / ".ci" / "readme_command.py"), str(n)],
                                 capture_output=True, text=True, check=True).stdout
        assert printed == command + "\n"


MODULES = sorted(m.name for m in pkgutil.iter_modules(fakeshard.__path__, "fakeshard.")
                 if m.name not in ("fakeshard.__main__",))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, extraglobs=vars(fakeshard), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_public_face_is_sorted_and_complete():
    assert fakeshard.__all__ == sorted(fakeshard.__all__)
    for name in fakeshard.__all__:
        assert hasattr(fakeshard, name)


def test_the_core_imports_neither_the_kit_nor_hypothesis():
    """``import fakeshard`` (and the engine's transports) need no test dependency: the kit,
    its strategies and Hypothesis come only with ``fakeshard.testing``."""
    code = ("import sys, fakeshard, fakeshard.wire, fakeshard.remote, fakeshard.server, fakeshard.real\n"
            "bad = sorted(m for m in sys.modules\n"
            "             if m.split('.')[0] == 'hypothesis' or m.startswith('fakeshard.testing'))\n"
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
