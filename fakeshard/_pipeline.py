"""A pipeline of engines whose layer ranges tile the model, head first."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from fakeshard._contract import HiddenBundle, SampleBundle, ShardSpec, TokenBundle, validate
from fakeshard._errors import MalformedBundle, ShardError
from fakeshard._protocol import ShardEngine

__all__ = ["Pipeline", "answer_problem"]


class Pipeline:
    """Chain ``stages`` (any :class:`ShardEngine`) whose ranges tile ``0..n_layers``.

    Every stage's output is checked against the request it answers (bundle
    type, session, epoch, positions, layer, shape, checksum, token range)
    before anything is passed on; a mismatch raises :class:`MalformedBundle`
    naming the stage.  For example::

        >>> from fakeshard import FakeShardEngine, ShardSpec
        >>> spec = ShardSpec("demo", n_layers=6, start_layer=0, end_layer=6)
        >>> pipe = Pipeline([FakeShardEngine(spec.with_layers(a, b)) for a, b in ((0, 2), (2, 4), (4, 6))])
        >>> full = Pipeline([FakeShardEngine(spec)])
        >>> pipe.generate("s", [1, 2, 3], 4) == full.generate("s", [1, 2, 3], 4)
        True
    """

    def __init__(self, stages: Sequence[ShardEngine]) -> None:
        stages = tuple(stages)
        if not stages:
            raise ValueError("Pipeline needs at least one stage")
        specs = []
        for i, stage in enumerate(stages):
            spec = getattr(stage, "spec", None)
            if not isinstance(spec, ShardSpec):
                raise ValueError(f"stage {i} has no ShardSpec .spec (got {type(stage).__name__})")
            specs.append(spec)
        first = specs[0]
        model = (first.model_id, first.n_layers, first.hidden_size, first.vocab_size)
        expected_start = 0
        for i, spec in enumerate(specs):
            if (spec.model_id, spec.n_layers, spec.hidden_size, spec.vocab_size) != model:
                raise ValueError(
                    f"stage {i} is of another model: {spec} vs stage 0's {first}"
                )
            if spec.start_layer != expected_start:
                raise ValueError(
                    f"stage {i} starts at layer {spec.start_layer}, expected {expected_start}: "
                    "stage ranges must tile 0..n_layers in order"
                )
            expected_start = spec.end_layer
        if expected_start != first.n_layers:
            raise ValueError(
                f"stages end at layer {expected_start}, but the model has {first.n_layers} layers"
            )
        self.stages = stages
        self.spec = first.with_layers(0, first.n_layers)
        #: Index of the stage whose call or output failed the last call, else ``None``
        #: (what a coordinator needs to know where to re-route).
        self.last_failed_stage: int | None = None
        classes = {getattr(stage, "evidence_class", "fixture") for stage in stages}
        #: "real-model" only if every stage runs real weights.
        self.evidence_class = "real-model" if classes == {"real-model"} else "fixture"

    def __repr__(self) -> str:
        ranges = ", ".join(f"{s.spec.start_layer}..{s.spec.end_layer}" for s in self.stages)
        return f"Pipeline({self.spec.model_id!r}: {ranges})"

    @property
    def used_tokens(self) -> int:
        return sum(stage.used_tokens for stage in self.stages)

    def prefill(self, session_id: str, epoch: int, start_pos: int, tokens: Sequence[int]) -> SampleBundle:
        """Prefill ``tokens`` at ``start_pos`` on every stage; the tail's sample."""
        return self._run("prefill", TokenBundle(session_id, epoch, start_pos, tuple(tokens)))

    def decode(self, session_id: str, epoch: int, pos: int, token: int) -> SampleBundle:
        """Decode ``token`` at ``pos`` on every stage; the tail's sample."""
        return self._run("decode", TokenBundle(session_id, epoch, pos, (token,)))

    def _run(self, op: str, request: TokenBundle) -> SampleBundle:
        bundle: Any = request
        n = len(request.tokens) if isinstance(request.tokens, tuple) else 0
        self.last_failed_stage = None
        for i, stage in enumerate(self.stages):
            try:
                out = getattr(stage, op)(bundle)
                self._check(i, op, request, n, out)
            except ShardError:
                self.last_failed_stage = i
                raise
            bundle = out
        return bundle

    def _check(self, i: int, op: str, request: TokenBundle, n: int, out: Any) -> None:
        stage = self.stages[i]
        problem = answer_problem(stage.spec, request, n, out, last=i == len(self.stages) - 1, model=self.spec)
        if problem is not None:
            where = f"stage {i} (layers {stage.spec.start_layer}..{stage.spec.end_layer}) answered {op}"
            raise MalformedBundle(f"{where} with {problem}", session_id=request.session_id, epoch=request.epoch)

    def cancel(self, session_id: str, epoch: int) -> None:
        """Cancel on every stage; every stage is tried, then the first error is raised."""
        self._everywhere("cancel", session_id, epoch)

    def release(self, session_id: str, epoch: int) -> None:
        """Release on every stage; every stage is tried, then the first error is raised."""
        self._everywhere("release", session_id, epoch)

    def _everywhere(self, op: str, session_id: str, epoch: int) -> None:
        first: ShardError | None = None
        self.last_failed_stage = None
        for i, stage in enumerate(self.stages):
            try:
                getattr(stage, op)(session_id, epoch)
            except ShardError as exc:
                if first is None:
                    first = exc
                    self.last_failed_stage = i
        if first is not None:
            raise first

    def generate(
        self, session_id: str, prompt: Sequence[int], max_new_tokens: int, epoch: int = 0
    ) -> list[int]:
        """Prefill ``prompt`` at position 0, then decode; the new tokens.

        The session stays open: its cache holds the prompt and every new
        token but the last, so the next ``decode`` is at
        ``len(prompt) + max_new_tokens - 1`` with the last token returned.
        """
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        sample = self.prefill(session_id, epoch, 0, prompt)
        tokens = [sample.token]
        while len(tokens) < max_new_tokens:
            sample = self.decode(session_id, epoch, sample.pos, sample.token)
            tokens.append(sample.token)
        return tokens


def answer_problem(stage: ShardSpec, request: Any, n: int, out: Any, *, last: bool,
                   model: Optional[ShardSpec] = None) -> Optional[str]:
    """What is wrong with ``out`` as a stage's answer to ``request``, or ``None``.

    ``request`` is the call's identity (``session_id``, ``epoch``, ``start_pos``) and ``n``
    the positions it carries; ``stage`` is the answering stage's spec, ``last`` whether it
    is the tail (it answers with a ``SampleBundle``), ``model`` the spec the bundle is
    validated against (default ``stage``).  The checks of :class:`Pipeline`, for any caller
    that judges a stage's answer (bundle type, validity, session, epoch, positions, layer).
    """
    want = SampleBundle if last else HiddenBundle
    if type(out) is not want:
        return f"{type(out).__name__}, expected {want.__name__}"
    try:
        validate(out, model or stage)
    except MalformedBundle as exc:
        return f"a bad bundle: {exc.message}"
    problems = []
    if out.session_id != request.session_id:
        problems.append(f"session {out.session_id!r} for {request.session_id!r}")
    if out.epoch != request.epoch:
        problems.append(f"epoch {out.epoch} for {request.epoch}")
    if isinstance(out, HiddenBundle):
        if out.start_pos != request.start_pos:
            problems.append(f"start_pos {out.start_pos} for {request.start_pos}")
        if len(out.hidden) != n:
            problems.append(f"{len(out.hidden)} positions for {n}")
        if out.layer != stage.end_layer:
            problems.append(f"layer {out.layer}, expected {stage.end_layer}")
    elif out.pos != request.start_pos + n:
        problems.append(f"pos {out.pos}, expected {request.start_pos + n}")
    return ", ".join(problems) or None
