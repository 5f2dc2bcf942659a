"""Save the reduced trace of every planted bug as a regression case.

    python3 -m tests.seed_regressions

Each saved story caught a planted bug; replayed on a correct engine it must
pass, so it pins the rule the bug broke.  (A fresh failure of `pytest
stateful` is saved the same way, automatically; see the README.)
"""

from __future__ import annotations

from fakeshard.testing import _profiles as profiles  # noqa: F401  (the kit's profiles)
from fakeshard.testing._machines import MachineConfig
from fakeshard.testing._regress import run_machine
from fakeshard.testing._trace import REGRESSIONS
from planted import CI_NO_SHRINK, MACHINES
from planted.engines import BUGS


def main() -> None:
    """Catch each planted bug the way tests/test_planted.py does, saving its trace."""
    for bug in BUGS:
        config = MachineConfig(bug.factory, f"planted.engines:{bug.name}")
        try:
            run_machine(MACHINES[bug.machine], config, settings=CI_NO_SHRINK, save_dir=REGRESSIONS,
                        note=f"caught planted bug {bug.name} ({bug.rule})")
        except AssertionError:
            print(f"{bug.name}: saved {len(config.failures[-1].steps)} steps")
        else:
            raise SystemExit(f"{bug.name} was not caught")


if __name__ == "__main__":
    main()
