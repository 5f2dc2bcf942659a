"""This repository's own tooling: not shipped in the wheel, run from the checkout's root.

* ``python3 -m tools.evidence`` -- run a campaign and the contract suite, and write this
  repository's evidence folder (``evidence/DGR-032/<class>``);
* ``python3 -m tools.mutate`` -- the mutation score of the contract logic (mutmut, the
  ``mutate`` extra), written to ``evidence/DGR-032/mutation`` (``--report-only`` sorts
  the last run's survivors again with today's ``reasons.json``).

What a user of the package runs is ``fakeshard`` (``check``, ``replay``, ``serve``, ...).
"""
