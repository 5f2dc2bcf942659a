"""Saved traces run again, in words: what ``fakeshard replay`` prints for each machine's trace.

:mod:`fakeshard.testing._registry` says which report a trace gets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from fakeshard._text import text_table
from fakeshard.testing._concurrent import Replayed, Scenario, timeline
from fakeshard.testing._lengths import compact
from fakeshard.testing._parallel import ParallelReplay
from fakeshard.testing._program import Replayed as ProgramReplayed
from fakeshard.testing._replay import ReplayResult
from fakeshard.testing._trace import Trace

__all__ = ["concurrent_report", "parallel_report", "program_report", "replay_table"]


def concurrent_report(path: Path, trace: Trace, name: str, again: Replayed) -> str:
    """A ``concurrent`` trace run again, in words: its scenario, the run's timeline, the verdict."""
    scenario = Scenario.from_dict(trace.config["scenario"])
    lines = [f"{path} (concurrent machine, found on {trace.engine_factory} with "
             f"{trace.config.get('coordinator')}, {trace.note or 'no note'})",
             f"scenario: {scenario.describe()}"]
    lines += [f"  {e.describe()}" for e in scenario.nemesis]
    lines += ["the run again (virtual seconds):", timeline(again.run.events)]
    lines.append("the same history, event for event, as the saved one" if again.same_history else
                 "NOT the saved history: the coordinator, the engine or the kit changed since")
    if again.run.failure is not None:
        lines.append(f"FAILS on {name} ({again.run.check}): {again.run.failure}")
    else:
        lines.append(f"passes on {name}; availability {again.run.availability:.3f}")
    return "\n".join(lines)


def program_report(path: Path, trace: Trace, name: str, again: ProgramReplayed, command: Optional[str]) -> str:
    """A ``program`` trace run again against a program, in words (real time: the same scenario,
    not the same interleaving)."""
    scenario = Scenario.from_dict(trace.config["scenario"])
    lines = [f"{path} (program machine, found on {trace.engine_factory} with "
             f"{trace.config.get('coordinator_cmd')!r}, {trace.note or 'no note'})",
             f"scenario: {scenario.describe()}"]
    lines += [f"  {e.describe()}" for e in scenario.nemesis]
    lines += [f"the run again with {command or trace.config.get('coordinator_cmd')!r} (real seconds; the same "
              "scenario, not the same interleaving):", timeline(again.run.events)]
    if again.run.failure is not None:
        same = "the same check as the saved run" if again.same_check else \
            f"not the saved run's check ({trace.config.get('check')})"
        lines.append(f"FAILS on {name} ({again.run.check}, {same}): {again.run.failure}")
    else:
        lines.append(f"passes on {name} this time (the saved run failed {trace.config.get('check')}); "
                     f"availability {again.run.availability:.3f}")
    lines.append(f"the program's log of this run: {again.log}")
    return "\n".join(lines)


def parallel_report(path: Path, trace: Trace, name: str, again: ParallelReplay) -> str:
    """A ``parallel`` trace re-checked and its program run again, in words."""
    lines = [f"{path} (parallel machine, found on {trace.engine_factory}, "
             f"{trace.note or 'no note'})",
             "the saved history, re-checked (ticks of one counter; [ ] from invocation to response):",
             again.saved]
    if again.failed:
        lines += [f"FAILS on {name}: a run of the program is not linearizable:",
                  again.message or ""]
    else:
        lines.append(f"passes on {name}: every run of the program is linearizable")
    return "\n".join(lines)


def replay_table(path: Path, trace: Trace, result: ReplayResult) -> str:
    """A sequential trace replayed, a row a step: what the model expected and what came."""
    steps = trace.steps
    new = result.trace
    first = result.first_divergence
    rows = []
    for i, step in enumerate(steps, 1):
        args = {k: v for k, v in step.items() if k not in ("op", "tokens", "prompt")}
        expected = new.expected[i - 1] if i - 1 < len(new.expected) else {}
        actual = new.actual[i - 1] if i - 1 < len(new.actual) else {}
        mark = ">>" if i == first else ""
        shown = json.dumps(args, separators=(",", ":"))
        for key in ("tokens", "prompt"):  # a long prompt as one short phrase, not thousands of tokens
            if key in step:
                shown += f" {key}={compact(step[key])}"
        rows.append((mark, str(i), step["op"], shown, _outcome(expected), _outcome(actual)))
    lines = [f"{path} ({trace.machine} machine, {trace.note or 'no note'})",
             text_table(("", "step", "op", "arguments", "expected", "actual"), rows)]
    if result.failed:
        lines.append(f"FAILS at step {first}: {result.message}")
    else:
        lines.append("passes: every step matches the reference model")
    return "\n".join(lines)


def _outcome(outcome: dict[str, Any]) -> str:
    if not outcome:
        return "-"
    parts = [str(outcome.get("outcome", "?"))]
    for key in ("row", "token", "pos", "expected", "got", "tokens"):
        if key in outcome:
            parts.append(f"{key}={outcome[key]}")
    output = outcome.get("output")
    if isinstance(output, dict) and "token" in output:
        parts.append(f"token={output['token']}")
    return " ".join(parts)
