"""Planted-bug engine factories by name, for `--engine tests.planted_factories:<bug>`."""

from tests.planted import BUGS

globals().update({bug.name: bug.factory for bug in BUGS})
