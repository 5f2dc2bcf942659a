"""Planted-bug engine factories by name, for `--engine planted.factories:<bug>`."""

from planted.engines import BUGS

globals().update({bug.name: bug.factory for bug in BUGS})
