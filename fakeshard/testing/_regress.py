"""Running machines, reducing and saving counterexamples.

``run_machine`` runs a machine under Hypothesis; when it fails, the shrunk
run's trace is reduced further (steps removed while it still fails) and
saved as JSON, with its timeline beside it.  Replaying a saved trace step by
step, with no search, is :mod:`fakeshard.testing._replay`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from hypothesis import seed as hypothesis_seed
from hypothesis import settings as Settings
from hypothesis.stateful import run_state_machine_as_test

from fakeshard.testing import _profiles as profiles
from fakeshard.testing._draws import stable_draws
from fakeshard.testing._lengths import token_count
from fakeshard.testing._registry import history_of
from fakeshard.testing._replay import replay_steps
from fakeshard.testing._save import keep
from fakeshard.testing._trace import REGRESSIONS, Trace

__all__ = ["reduce", "run_machine", "simpler_plans"]


def reduce(trace: Trace, factory: Callable[..., Any], factory_name: str, tolerance: float = 0.0) -> Trace:
    """Remove steps, and simplify the world, while the trace still fails the same way.

    "The same way" is the same type of failure (a model divergence stays a
    divergence), so reduction never trades the bug for a malformed story.  The steps
    after the first failing one go first (they never ran); then each long prompt is cut
    short where the failure stays (:func:`_shorter_prompts`: every replay after that is
    cheap); then steps go (ddmin-style, to a fixed point); then, for a trace whose world
    holds fault plans (``config["fault_plans"]``, or a single engine's
    ``config["fault_plan"]``), one rule at a time is dropped, fired earlier or made
    certain (:func:`simpler_plans`), and steps are removed again, until neither helps.
    """
    original = replay_steps(trace, factory, factory_name, tolerance)
    if not original.failed:
        return original.trace

    def still_fails(steps: list[dict[str, Any]], config: dict[str, Any]) -> bool:
        attempt = Trace(**{**trace.__dict__, "config": config, "steps": steps, "expected": [], "actual": []})
        result = replay_steps(attempt, factory, factory_name, tolerance)
        return result.failed and result.error_type == original.error_type

    steps, config = list(trace.steps), trace.config
    if original.first_divergence is not None and original.first_divergence < len(steps) \
            and still_fails(steps[:original.first_divergence], config):
        steps = steps[:original.first_divergence]
    while True:
        steps = _shorter_prompts(steps, lambda candidate: still_fails(candidate, config))
        steps = _fewer_steps(steps, lambda candidate: still_fails(candidate, config))
        simpler = next((c for c in simpler_plans(config) if still_fails(steps, c)), None)
        if simpler is None:
            break
        config = simpler
    final = replay_steps(Trace(**{**trace.__dict__, "config": config, "steps": steps}), factory, factory_name,
                         tolerance)
    return final.trace


#: A prompt of at most this many tokens is left as it is by :func:`_shorter_prompts`.
SHORT_PROMPT = 8


def _shorter_prompts(steps: list[dict[str, Any]],
                     still_fails: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
    """Each long ``prompt`` (a coordinator machine's ``start``: a seeded run, or a list of
    tokens) cut to :data:`SHORT_PROMPT` tokens, else to half, where the trace still fails;
    the longest first.  A long prompt is what makes a replay slow (every failover replays
    it from position 0), so reduction cuts it before it removes steps one replay at a time."""
    order = sorted((i for i, step in enumerate(steps) if "prompt" in step
                    and token_count(step["prompt"]) > SHORT_PROMPT),
                   key=lambda i: -token_count(steps[i]["prompt"]))
    for i in order:
        for size in (SHORT_PROMPT, token_count(steps[i]["prompt"]) // 2):
            prompt = steps[i]["prompt"]
            cut = {**prompt, "count": size} if isinstance(prompt, dict) else prompt[:size]
            candidate = steps[:i] + [{**steps[i], "prompt": cut}] + steps[i + 1:]
            if still_fails(candidate):
                steps = candidate
                break
    return steps


def _fewer_steps(steps: list[dict[str, Any]],
                 still_fails: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
    """Remove chunks of steps, halving their size down to single steps, until no single step can go."""
    size = max(len(steps) // 2, 1)
    while True:
        removed = False
        start = len(steps) - size
        while start >= 0:
            candidate = steps[:start] + steps[start + size:]
            if candidate and still_fails(candidate):
                steps, removed = candidate, True
            start -= size
        if size > 1:
            size //= 2
        elif not removed:
            return steps


def simpler_plans(config: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Worlds one step simpler than ``config``'s fault plans (wire form: per node, or the one
    plan of a single engine), simplest first: a rule dropped, then a rule's ``nth`` brought
    down to 1 (or one less), its ``count`` to 1, its ``probability`` to 1 (no draw).  Nothing
    for a config without them."""
    single = isinstance(config.get("fault_plan"), dict)
    plans = [config["fault_plan"]] if single else config.get("fault_plans")
    if not isinstance(plans, list):
        return
    places = [(k, i) for k, plan in enumerate(plans) for i in range(len(plan.get("rules", ())))]

    def changed(k: int, i: int, rule: Optional[dict[str, Any]]) -> dict[str, Any]:
        rules = list(plans[k]["rules"])
        if rule is None:
            del rules[i]
        else:
            rules[i] = rule
        new = list(plans)
        new[k] = {**plans[k], "rules": rules}
        return {**config, "fault_plan": new[0]} if single else {**config, "fault_plans": new}

    for k, i in places:
        yield changed(k, i, None)
    for k, i in places:
        rule = plans[k]["rules"][i]
        nth, count, probability = rule.get("nth", 1), rule.get("count", 1), rule.get("probability", 1.0)
        for simpler in ({"nth": 1}, {"nth": nth - 1}, {"count": 1}, {"probability": 1.0}):
            key, value = next(iter(simpler.items()))
            now = {"nth": nth, "count": count, "probability": probability}[key]
            if value is not None and value != now and (key != "nth" or value >= 1) \
                    and (key != "count" or now is None or value < now):
                yield changed(k, i, {**rule, **simpler})


def run_machine(
    machine: Callable[[Any], Any],
    config: Any,
    *,
    settings: Optional[Settings] = None,
    save_dir: Optional[Path] = REGRESSIONS,
    note: str = "",
    seed: Optional[int] = None,
    reduce_failure: Optional[bool] = None,
) -> None:
    """Run ``machine(config)`` under Hypothesis; on failure save the reduced trace and re-raise.

    ``seed`` fixes Hypothesis's generator (ignored by a derandomized profile);
    ``reduce_failure=False`` saves the failing trace as it was found (by default, under the
    ``mutate`` profile: :func:`fakeshard.testing._profiles.reduces_failures`).
    """
    def factory() -> Any:
        return machine(config)

    if seed is not None:
        factory = hypothesis_seed(seed)(factory)
    try:
        with stable_draws():
            # Hypothesis takes any callable that returns a machine; its annotation says a class.
            run_state_machine_as_test(factory, settings=settings)  # type: ignore[arg-type]
    except BaseException as exc:
        trace = config.last_failure
        if trace is not None:
            trace.note = note or trace.note
            if reduce_failure is None:
                reduce_failure = profiles.reduces_failures()
            reduced = reduce(trace, config.factory, config.factory_name, config.tolerance) if reduce_failure \
                else trace
            path = keep(reduced, config, save_dir, lambda: history_of(reduced, config.factory, config.factory_name,
                                                                      config.tolerance))
            if path is not None:
                if hasattr(exc, "add_note"):
                    exc.add_note(f"fakeshard: reduced trace of {len(reduced.steps)} steps saved to {path}")
        raise
