"""Engines, racy engines and coordinators with one bug planted in each: how this repository
shows that its machines catch bugs (``tests/test_planted*.py``), and what the catch
benchmark times (``benchmarks/catch.py``).  Not shipped with the package.

* :mod:`planted.engines`: single-engine bugs (the sessions, faults and failover machines);
* :mod:`planted.racy`: engines that break under concurrent callers (the parallel machine);
* :mod:`planted.coordinators`: coordinators with one bug each (the coordinator machine);
* :mod:`planted.factories`: the engines of :mod:`planted.engines` by name, for
  ``--engine planted.factories:<bug>``.

A planted bug is caught under the ``ci`` profile's settings without Hypothesis's shrink
phase (:data:`CI_NO_SHRINK`): each step runs an engine and a model, so shrinking takes
minutes per bug; the step-removal reduction every saved trace gets keeps them short.
"""

from __future__ import annotations

from hypothesis import Phase, settings

from fakeshard.testing import _profiles as profiles
from fakeshard.testing._failover import FailoverMachine
from fakeshard.testing._machines import FaultsMachine, SessionsMachine

#: The machine that catches each kind of planted engine bug, by the bug's ``machine``.
MACHINES = {"sessions": SessionsMachine, "faults": FaultsMachine, "failover": FailoverMachine}
#: The ``ci`` profile's settings without the shrink phase.
CI_NO_SHRINK = settings(profiles.get("ci"), phases=[Phase.explicit, Phase.reuse, Phase.generate])
