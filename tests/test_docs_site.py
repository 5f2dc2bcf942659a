"""The documentation site builds with warnings as errors, and its API reference is the public face.

Needs the ``docs`` extra (Sphinx, MyST); the README's test command
installs it.
"""

from __future__ import annotations

import html
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason="the documentation site needs the extra 'docs'")
pytest.importorskip("myst_parser", reason="the documentation site needs the extra 'docs'")
pytest.importorskip("myst_parser", reason="the documentation site needs the extra 'docs'")

from sphinx.util.inventory import InventoryFile  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
#: The modules the API reference documents, each exactly by its ``__all__``.
DOCUMENTED = ("fakeshard", "fakeshard.wire", "fakeshard.remote", "fakeshard.real", "fakeshard.testing",
              "fakeshard.testing.checks")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                            str(ROOT / "docs"), str(out)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-4000:]
    return out


def _documented(site: Path) -> dict[str, set[str]]:
    with open(site / "objects.inv", "rb") as f:
        inventory = InventoryFile.load(f, "", lambda base, uri: uri)
    names: dict[str, set[str]] = {module: set() for module in DOCUMENTED}
    for kind, entries in inventory.items():
        if not kind.startswith("py:") or kind == "py:module":
            continue
        for full in entries:
            module = max((m for m in DOCUMENTED if full.startswith(m + ".")), key=len, default=None)
            if module is not None and "." not in full[len(module) + 1:]:
                names[module].add(full[len(module) + 1:])
    return names


def test_the_site_builds_and_its_api_reference_is_exactly_all(site):
    documented = _documented(site)
    for module in DOCUMENTED:
        public = set(importlib.import_module(module).__all__)
        assert documented[module] == public, (module, sorted(documented[module] ^ public))


def test_every_page_is_in_the_site(site):
    pages = {p.relative_to(ROOT / "docs").with_suffix(".html").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    built = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    assert pages <= built, sorted(pages - built)


def test_the_command_line_reference_is_what_the_parser_says():
    """docs/reference/cli.md is written from the parser (python3 -m tools.cli_reference), and reads
    whole without the site: a change to an option that leaves the page behind fails here."""
    from tools.cli_reference import PAGE, python, render, written_with

    page = PAGE.read_text(encoding="utf-8")
    assert "```{eval-rst}" not in page and "## fakeshard check" in page
    if written_with(page) != python():
        pytest.skip(f"the page was written with Python {written_with(page)}, whose argparse lays help out "
                    f"as this Python {python()} may not")
    assert page == render(), "run python3 -m tools.cli_reference"


def test_the_command_line_reference_has_every_command(site):
    page = html.unescape(re.sub(r"<[^>]+>", "", (site / "reference" / "cli.html").read_text(encoding="utf-8")))
    for command in ("demo", "check", "replay", "serve", "schema"):
        assert f"fakeshard {command}" in page, command
    assert "--min-branch-coverage" in page and "--time-scale" in page


def test_every_value_the_api_reference_writes_out_is_the_code_s():
    """The constants the reference documents by hand (``py:data`` with a ``:value:``) hold those values."""
    import ast

    text = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    found = re.findall(r"\.\. py:data:: (\w+)\n   :module: ([\w.]+)\n(?:   :type: .*\n)?   :value: (.*)\n", text)
    assert len(found) >= 7
    for name, module, value in found:
        assert getattr(importlib.import_module(module), name) == ast.literal_eval(value), (module, name)
