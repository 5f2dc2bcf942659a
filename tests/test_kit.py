"""The kit from an installed wheel: a throwaway project in a fresh virtual environment.

The wheel is built from this checkout offline, installed without dependencies into a
fresh venv that sees the running interpreter's packages (Hypothesis, pytest, numpy, ...),
whether that is a virtual environment, the system's or a conda one, and
used from a folder that is not the checkout: the plugin's options, markers and
fixtures, the guide's coordinator adapter under ``fakeshard check --coordinator``, a
buggy coordinator caught with its trace saved where the project says, and ``replay``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDE = (ROOT / "docs" / "how-to" / "test-a-coordinator.md").read_text(encoding="utf-8")

# One worker builds the wheel, once: the build is in the checkout's build/ folder, so two
# workers building at once (the module fixture runs per worker) race there.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kit")]


def _run(cmd: list[str], cwd: Path, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("FAKESHARD_", "PYTEST_", "COV_", "COVERAGE_")) and k != "PYTHONPATH"}
    return subprocess.run(cmd, cwd=cwd, env={**clean, **env}, capture_output=True, text=True, timeout=timeout)


def _site_dirs() -> list[str]:
    """The folders this interpreter imports installed packages from, the checkout's excepted.

    ``site.getsitepackages()`` names them wherever the suite runs: a virtual environment
    (with the base interpreter's too, where it was made with ``--system-site-packages``), the
    system interpreter or a conda environment.  A folder is not a site folder of its own in
    the throwaway environment, so the ``.pth`` files in it (an editable install of this
    checkout among them) are not run there.
    """
    dirs = site.getsitepackages() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])
    return [d for d in dict.fromkeys(dirs) if Path(d).is_dir() and not Path(d).resolve().is_relative_to(ROOT)]


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("kit")
    # The wheel is built from a copy of what the package's build reads, so setuptools' build/
    # and egg-info folders go there: nothing is written into the checkout, and nothing a
    # build elsewhere left in it (or is writing there now) reaches this one.
    source = tmp / "source"
    shutil.copytree(ROOT / "fakeshard", source / "fakeshard", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                  "-q", "-w", str(tmp / "dist"), str(source)], cwd=tmp)
    assert built.returncode == 0, built.stderr
    wheel = next((tmp / "dist").glob("fakeshard-*.whl"))
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")], cwd=tmp)
    assert made.returncode == 0, made.stderr
    python = tmp / "venv" / "bin" / "python"
    own = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp)
    assert own.returncode == 0, own.stderr
    # This interpreter's packages (Hypothesis, pytest, numpy, ...) come after the venv's own
    # folder, where the wheel goes: the wheel's fakeshard is found first.
    (Path(own.stdout.strip()) / "_running_interpreter.pth").write_text("\n".join(_site_dirs()) + "\n")
    installed = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                      "-q", str(wheel)], cwd=tmp)
    assert installed.returncode == 0, installed.stderr
    return python


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A project of a coordinator team: the guide's adapter, a buggy one, and its own tests."""
    root = tmp_path_factory.mktemp("project")
    (root / "mypkg").mkdir()
    (root / "mypkg" / "__init__.py").write_text("")
    adapter = next(b for b in re.findall(r"```python\n(.*?)```", GUIDE, flags=re.S)
                   if b.startswith("# mypkg/fakeshard_adapter.py"))
    (root / "mypkg" / "fakeshard_adapter.py").write_text(adapter)
    (root / "mypkg" / "leaky.py").write_text(textwrap.dedent('''
        from fakeshard.testing import Coordinator

        class Leaky(Coordinator):
            def release_route(self, session_id, s, pipe):
                self.route[-1].release(session_id, s.epoch)  # the tail only

        def make(stages, *, clock):
            return Leaky.from_stages(stages, clock=clock)
    '''))
    (root / "tests").mkdir()
    (root / "tests" / "test_ours.py").write_text(textwrap.dedent('''
        from hypothesis import given, settings

        from fakeshard.testing import strategies as fs


        def test_fixtures(engine_factory, fake_pipeline, cluster, virtual_clock, coordinator_factory):
            assert len(fake_pipeline.generate("s", [1, 2, 3], 3)) == 3
            assert [len(stage) for stage in cluster.stages] == [2, 2, 2]
            coordinator = coordinator_factory(cluster.stages, clock=virtual_clock)
            coordinator.start("s", [1, 2, 3])
            assert coordinator.next_token("s") == fake_pipeline.generate("t", [1, 2, 3], 1)[0]
            coordinator.release("s")


        def test_our_hypothesis_settings_are_our_own():
            # Hypothesis's own default (its "ci" profile where CI is set), not one of the kit's.
            assert settings.get_current_profile_name() in ("default", "ci")
            assert settings.default.max_examples == 100 and settings.default.stateful_step_count == 50


        @given(fs.specs(role="head"))
        def test_strategies(spec):
            assert spec.start_layer == 0
    '''))
    return root


def test_the_wheel_installs_the_kit_and_the_plugin(venv, project):
    where = _run([str(venv), "-c", "import fakeshard, sys; print(fakeshard.__file__); "
                  "import fakeshard.testing.plugin; print('hypothesis' in sys.modules)"], cwd=project)
    assert where.returncode == 0, where.stderr
    path, imported = where.stdout.split()
    assert str(venv.parent.parent) in path and str(ROOT) not in path  # the wheel's copy, not the checkout
    assert imported == "False"  # the plugin imports no Hypothesis
    run = _run([str(venv), "-m", "pytest", "-p", "no:cacheprovider", "tests"], cwd=project)  # the header shows
    assert run.returncode == 0, run.stdout + run.stderr
    assert "fakeshard engine factory: fakeshard:FakeShardEngine" in run.stdout and "3 passed" in run.stdout


def test_check_and_replay_a_coordinator_from_the_wheel(venv, project):
    ok = _run([str(venv), "-m", "fakeshard", "check", "--coordinator", "mypkg.fakeshard_adapter:make",
               "--profile", "dev", "--examples", "10", "--steps", "12", "--coverage"], cwd=project)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert re.search(r"^coordinator\s+\d+\s+\d+.*passed$", ok.stdout, flags=re.M), ok.stdout
    assert (project / ".fakeshard" / "check" / "coverage.json").is_file()
    readme = _run([str(venv), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "fakeshard.testing.suite",
                   "-k", "coordinator", "--coordinator", "mypkg.fakeshard_adapter:make"], cwd=project,
                  FAKESHARD_PROFILE="dev")
    assert readme.returncode == 0 and "1 passed" in readme.stdout, readme.stdout + readme.stderr
    bad = _run([str(venv), "-m", "fakeshard", "check", "--coordinator", "mypkg.leaky:make", "--profile", "dev",
                "--examples", "20", "--steps", "12", "--seed", "1"], cwd=project)
    assert bad.returncode == 1 and "FAILED" in bad.stdout, bad.stdout + bad.stderr
    traces = sorted((project / ".fakeshard" / "traces").glob("coordinator-*.json"))
    assert traces, bad.stdout
    # Beside each trace, its timeline: the page ships in the wheel, and it shows the node calls.
    page = traces[0].with_suffix(".html").read_text(encoding="utf-8")
    assert '"kind": "node"' in page and "was released, but node" in page
    assert '<svg xmlns="http://www.w3.org/2000/svg" id="messages"' in page  # the coordinator's traffic
    again = _run([str(venv), "-m", "fakeshard", "replay", str(traces[0])], cwd=project)
    assert again.returncode == 1 and "was released, but node" in again.stdout, again.stdout + again.stderr
    fixed = _run([str(venv), "-m", "fakeshard", "replay", str(traces[0]), "--coordinator",
                  "mypkg.fakeshard_adapter:make"], cwd=project)
    assert fixed.returncode == 0 and "passes" in fixed.stdout, fixed.stdout + fixed.stderr


def test_check_a_coordinator_program_from_the_wheel(venv, project):
    """The program machine from the wheel: nodes served on loopback and the kit's reference
    program (shipped in the wheel) under test, by the command line and by the pytest plugin."""
    program = f"{shlex.quote(str(venv))} -m fakeshard.testing.coordinator_program"
    ok = _run([str(venv), "-m", "fakeshard", "check", "--coordinator-cmd", program, "--profile", "dev",
               "--examples", "2", "--seed", "0"], cwd=project)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert re.search(r"^program\s+\d+\s+\d+.*passed$", ok.stdout, flags=re.M), ok.stdout
    plugin = _run([str(venv), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "fakeshard.testing.suite",
                   "-k", "program", "--coordinator-cmd", program], cwd=project, FAKESHARD_PROFILE="dev",
                  FAKESHARD_MAX_EXAMPLES="2")
    assert plugin.returncode == 0 and "1 passed" in plugin.stdout, plugin.stdout + plugin.stderr
