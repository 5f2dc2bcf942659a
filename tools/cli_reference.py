"""Write ``docs/reference/cli.md`` from the ``fakeshard`` command's own parser.

    python3 -m tools.cli_reference          # rewrite the page
    python3 -m tools.cli_reference --check  # exit 1 if the page is not what the parser says

The page is plain Markdown (each command's ``--help`` in a code block), so it reads whole
on a forge and in the checkout, not only on the built site; ``tests/test_docs_site.py``
checks that it is current.  Help is rendered at 100 columns, whatever the terminal.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "cli.md"

INTRO = """\
# The command line

`fakeshard` (also `python3 -m fakeshard`) is the package's command. This page is each
command's `--help`, written by `python3 -m tools.cli_reference` from the parser itself (a
test checks it is current). This repository's own tooling (`python3 -m tools.evidence`,
`python3 -m tools.mutate`) is not part of it: see [Development](../development.md).

Exit codes: 0 when everything asked for passed; 1 when a campaign found a failure or a
replayed trace failed again; 2 for a usage error, named in one line before anything runs
(an unknown option, a missing or corrupt trace, a factory that cannot be imported, a
program that cannot be run, a missing extra).
"""


def python() -> str:
    """The Python the page is written with: argparse's layout changes between versions."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def written_with(text: str) -> str:
    """The Python version a page names (``""``: none)."""
    found = re.search(r"<!-- written with Python (\d+\.\d+)", text)
    return found.group(1) if found else ""


def render() -> str:
    from fakeshard._cli import parser

    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal; the page must not depend on it
    top = parser()
    header = f"<!-- written with Python {python()} by python3 -m tools.cli_reference: do not edit -->\n"
    sections = [header + INTRO, "## fakeshard\n\n```text\n" + top.format_help().rstrip() + "\n```\n"]
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        sections.append(f"## fakeshard {name}\n\n```text\n{sub.format_help().rstrip()}\n```\n")
    return "\n".join(sections)


def main(argv: list[str]) -> int:
    text = render()
    if argv == ["--check"]:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != text:
            sys.stderr.write(f"{PAGE} is not current: run python3 -m tools.cli_reference\n")
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
