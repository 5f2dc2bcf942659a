"""``fakeshard demo``: a head -> middle -> tail pipeline living through faults.

A tiny coordinator drives two sessions through three stages while a fault
plan crashes the middle, drops a response from the head and delays the tail.
On any failure it bumps the session's epoch, re-routes around a crashed stage
to a spare, and replays the history; at the end each session's tokens are
compared with a fault-free run.  Every stage call is one row of the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TextIO

from fakeshard._clock import VirtualClock
from fakeshard._contract import SampleBundle, ShardSpec, TokenBundle
from fakeshard._engine import FakeShardEngine
from fakeshard._errors import EngineCrashed, ShardError
from fakeshard._faults import Crash, Delay, DropResponse, FaultPlan, FaultRule
from fakeshard._pipeline import Pipeline
from fakeshard._text import text_table
from fakeshard._topology import stage_ranges

__all__ = ["run_demo"]

SPEC = ShardSpec("demo-llm", n_layers=6, start_layer=0, end_layer=6)
PROMPTS = {"alice": (11, 12, 13, 14), "bob": (21, 22)}
NEW_TOKENS = 4
RANGES = stage_ranges(3)


def _plans() -> dict[str, FaultPlan]:
    every_call = FaultRule(Delay(0.002), count=None)  # a 2 ms latency model, opt-in
    return {
        "head": FaultPlan((every_call, FaultRule(DropResponse(), op="decode", nth=5))),
        "middle": FaultPlan((every_call, FaultRule(Crash(), op="decode", nth=3))),
        "tail": FaultPlan((every_call, FaultRule(Delay(0.25), op="prefill", count=None))),
        "spare": FaultPlan((every_call,)),
    }


@dataclass
class _Session:
    prompt: tuple[int, ...]
    epoch: int = 0
    generated: list[int] = field(default_factory=list)


def _fault_free(seed: int) -> dict[str, list[int]]:
    pipe = Pipeline([FakeShardEngine(SPEC.with_layers(a, b), seed=seed) for a, b in RANGES])
    return {sid: pipe.generate(sid, prompt, NEW_TOKENS) for sid, prompt in PROMPTS.items()}


def run_demo(out: TextIO, *, seed: int = 0) -> int:
    """Print the demo's table to ``out``; 0 if every stream matches the fault-free one."""
    demo = _Demo(seed)
    for _ in range(NEW_TOKENS):
        for sid in demo.sessions:
            demo.step(sid)
    for sid, s in demo.sessions.items():
        for i in range(len(demo.stages)):
            demo.call(i, "release", (sid, s.epoch))
    return demo.report(out, seed)


class _Demo:
    """Three stages and a spare on one virtual clock, three sessions, and the log of every call."""

    def __init__(self, seed: int) -> None:
        self.clock = VirtualClock()
        plans = _plans()
        self.names = ["head", "middle", "tail"]
        self.stages = [FakeShardEngine(SPEC.with_layers(a, b), seed=seed, clock=self.clock, faults=plans[name])
                       for name, (a, b) in zip(self.names, RANGES)]
        self.spare = FakeShardEngine(SPEC.with_layers(*RANGES[1]), seed=seed, clock=self.clock,
                                     faults=plans["spare"])
        self.rows: list[tuple[str, ...]] = []
        self.sessions = {sid: _Session(prompt) for sid, prompt in PROMPTS.items()}

    def call(self, i: int, op: str, bundle: Any) -> Any:
        """One stage call, logged as a row whatever its outcome."""
        start = self.clock.now()
        if op == "release":
            sid, epoch, positions = bundle[0], bundle[1], ""
        else:
            sid, epoch, positions = bundle.session_id, bundle.epoch, _positions(bundle)
        outcome = "?"
        stage = self.stages[i]
        try:
            result = getattr(stage, op)(*bundle) if op == "release" else getattr(stage, op)(bundle)
            outcome = f"ok -> token {result.token}" if hasattr(result, "token") else "ok"
            return result
        except ShardError as exc:
            outcome = exc.code
            raise
        finally:
            self.rows.append((f"{start:.3f}", op, f"{self.names[i]}({_range(stage)})",
                              sid, str(epoch), positions, outcome))

    def through(self, op: str, bundle: TokenBundle) -> int:
        out: Any = bundle
        for i in range(len(self.stages)):
            out = self.call(i, op, out)
        assert isinstance(out, SampleBundle)  # the tail samples
        return out.token

    def step(self, sid: str) -> None:
        """One new token of ``sid``; on a failure: a new epoch, a reroute past a crashed stage,
        the history replayed, and the step tried again."""
        s = self.sessions[sid]
        for _attempt in range(4):
            try:
                if not s.generated:
                    s.generated.append(self.through("prefill", TokenBundle(sid, s.epoch, 0, s.prompt)))
                else:
                    pos = len(s.prompt) + len(s.generated) - 1
                    s.generated.append(self.through("decode", TokenBundle(sid, s.epoch, pos, (s.generated[-1],))))
                return
            except ShardError as exc:
                s.epoch += 1
                if isinstance(exc, EngineCrashed):
                    self._reroute(sid, s.epoch)
                # Replay the history (prompt and every token but the newest) at the new epoch.
                history = s.prompt + tuple(s.generated[:-1])
                if s.generated:
                    replayed = self.through("prefill", TokenBundle(sid, s.epoch, 0, history))
                    if replayed != s.generated[-1]:
                        raise AssertionError("replay changed the token")  # pragma: no cover
                    # The failed step is retried by the loop, from the replayed cache.
        raise RuntimeError(f"session {sid!r} kept failing")  # pragma: no cover

    def _reroute(self, sid: str, epoch: int) -> None:
        down = next(i for i, st in enumerate(self.stages) if getattr(st, "crashed", False))
        self.rows.append((f"{self.clock.now():.3f}", "reroute", f"{self.names[down]} -> spare",
                          sid, str(epoch), "", "coordinator"))
        self.stages[down] = self.spare
        self.names[down] = "spare"

    def report(self, out: TextIO, seed: int) -> int:
        header = ("step", "t (s)", "op", "stage", "session", "epoch", "positions", "outcome")
        out.write(text_table(header, [(str(n),) + row for n, row in enumerate(self.rows, 1)]) + "\n")
        expected = _fault_free(seed)
        ok = True
        out.write("\n")
        for sid, s in self.sessions.items():
            same = s.generated == expected[sid]
            ok &= same
            out.write(f"{sid}: tokens {s.generated} (epoch {s.epoch}); fault-free run: "
                      f"{expected[sid]} -> {'same' if same else 'DIFFERENT'}\n")
        used = sum(st.used_tokens for st in self.stages)
        out.write(f"cached positions left after release: {used}; virtual time {self.clock.now():.3f} s\n")
        return 0 if ok and used == 0 else 1


def _range(stage: FakeShardEngine) -> str:
    return f"{stage.spec.start_layer}..{stage.spec.end_layer}"


def _positions(bundle: Any) -> str:
    n = len(bundle.tokens) if isinstance(bundle, TokenBundle) else len(bundle.hidden)
    return str(bundle.start_pos) if n == 1 else f"{bundle.start_pos}..{bundle.start_pos + n - 1}"
