"""Sphinx configuration of the fakeshard documentation site.

Build it from the checkout's root (``pip install -e '.[docs]'`` first)::

    python3 -m sphinx -W -b html docs docs/_build/html

Sphinx with MyST (Markdown pages, so the contract and the guides read the same on a
forge as on the site) and autodoc for the API reference, which reads the code. The
command line's page is written from the parser by ``python3 -m tools.cli_reference``
(plain Markdown, so it reads whole on a forge too), and a test checks it is current.
"""

project = "fakeshard"
author = "the fakeshard developers"
copyright = "the fakeshard developers (MIT)"
extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "examples"]
# Headings up to level 4 get anchors, so links such as contract.md#the-hidden-checksum resolve.
myst_heading_anchors = 4
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
html_theme = "alabaster"
html_title = "fakeshard"
