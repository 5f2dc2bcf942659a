"""An engine written from the contract alone, as another team would, and its adapter.

``runtime.py`` is that team's runtime: its own API, its own errors, its own
arithmetic, and no import of fakeshard. ``adapter.py`` is the glue a user
writes to point fakeshard's suites at it (``--engine
tests.independent.adapter:make_engine``). ``test_independent.py`` runs the
contract suites on it, and on copies with one rule broken.
"""
