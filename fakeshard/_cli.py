"""The ``fakeshard`` command: ``demo``, ``check``, ``replay``, ``serve``, ``schema``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Sequence, TextIO

if TYPE_CHECKING:
    from fakeshard._check import CheckOptions, CheckResult

__all__ = ["add_campaign_options", "campaign_options", "main", "parser"]


class _Parser(argparse.ArgumentParser):
    """Errors in one line, no usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _machines(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def add_campaign_options(p: argparse.ArgumentParser) -> None:
    """The options of a campaign (``fakeshard check``'s), for a command built on it."""
    p.add_argument("--profile", default="ci", help="Hypothesis profile: dev, ci (default), thorough")
    p.add_argument("--seed", type=int, default=None, help="Hypothesis seed (each xdist worker adds its index)")
    p.add_argument("--examples", type=int, default=None, help="examples per machine (default: the profile's)")
    p.add_argument("--steps", type=int, default=None, help="steps per example (default: the profile's)")
    from fakeshard._check import ALL_MACHINES, MACHINES

    p.add_argument("--machines", type=_machines, default=None,
                   help=f"comma-separated subset of {','.join(ALL_MACHINES)} (default: {','.join(MACHINES)})")
    p.add_argument("--engine", default=None,
                   help="engine factory module:callable (default: $FAKESHARD_ENGINE, else fakeshard:FakeShardEngine)")
    p.add_argument("--engine-url", default=None, metavar="CONTROL_URL",
                   help="an engine host already running (any language, HTTP API v1): its control port's URL; "
                        "every engine the campaign makes is a node the host adds (docs/contract.md, Engine hosts)")
    p.add_argument("--engine-cmd", default=None, metavar="'CMD ARGS'",
                   help="a command that starts an engine host and prints its roster line; started before the "
                        "campaign, stopped (with its children) after it")
    p.add_argument("--workers", type=int, default=1, help="pytest-xdist workers (default 1)")
    p.add_argument("--out", type=Path, default=Path(".fakeshard/check"),
                   help="where the pytest log, the machines' summaries and (with --coverage) coverage data and "
                        "reports go (default .fakeshard/check, "
                        "under the checkout or else the current folder)")
    p.add_argument("--traces", type=Path, default=None,
                   help="where failing machines save reduced traces (default: $FAKESHARD_TRACES_DIR, else "
                        ".fakeshard/traces for your own coordinator's or program's, else stateful/regressions "
                        "in the checkout, else .fakeshard/traces)")
    p.add_argument("--coverage", action="store_true",
                   help="measure the campaign's branch coverage of fakeshard/ (the kit's own code: a figure for "
                        "its developers and its evidence; about twice the time), reports under --out")
    p.add_argument("--min-branch-coverage", type=float, default=None,
                   help="fail if branch coverage of fakeshard/ from the campaign (machines and engine checks) "
                        "is below this percent (implies --coverage)")
    p.add_argument("--certify", action="store_true",
                   help="require a real-model engine (refused for fixture engines)")
    p.add_argument("--coordinator", default=None, metavar="MODULE:CALLABLE",
                   help="coordinator factory, called as factory(stages, clock=clock), for the coordinator "
                        "machines (default: $FAKESHARD_COORDINATOR, else the kit's references); a synchronous "
                        "one runs in the coordinator machine, an async one in the concurrent machine; with it "
                        "and no --machines, only those two run")
    p.add_argument("--coordinator-cmd", default=None, metavar="'CMD ARGS'",
                   help="a coordinator program speaking the stdio protocol (any language), run by the program "
                        "machine over served nodes on loopback in real time (default: "
                        "$FAKESHARD_COORDINATOR_CMD); with it and no --machines, only that machine runs")
    p.add_argument("--request-timeout", type=float, default=None, metavar="SECONDS",
                   help="the program machine fails a run when a request stays unanswered this long (real "
                        "seconds; default: 30); raise it for engines whose calls take long")
    p.add_argument("--availability", type=float, default=None, metavar="SHARE",
                   help="fail the concurrent machine when the share of next_token requests answered with a "
                        "token is below SHARE (0..1; default: reported only)")
    p.add_argument("--junit-xml", type=Path, default=None, metavar="FILE", dest="junit_xml",
                   help="also write a JUnit XML report for a CI to show: a case per machine and per engine check, "
                        "a failure's message and trace (pytest's own --junitxml)")
    p.add_argument("--known-failing", type=Path, default=None, metavar="FILE", dest="known_failing",
                   help="a file naming the checks expected to fail, one a line (a machine, or a check of "
                        "fakeshard.testing.checks): their failures are reported as known, and one that passes "
                        "fails the run, so a partial implementation gates its CI from the first day")
    p.add_argument("--json", type=Path, default=None, metavar="FILE", dest="json_out",
                   help="also write the summary as JSON to FILE (machines, examples, probes or situations "
                        "reached and missed, faults fired, error codes, result, traces; docs/how-to/campaigns.md)")
    p.add_argument("--database", default=None, metavar="URL",
                   help="Hypothesis example database shared between hosts: redis://host:port/db or a "
                        "folder (default: $FAKESHARD_DATABASE; needs a randomized profile)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fakeshard",
        description="A deterministic fake shard engine for testing LLM pipeline coordinators.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    demo = sub.add_parser("demo", help="run a head/middle/tail pipeline through faults and print each step")
    demo.add_argument("--seed", type=int, default=0, help="engine seed (default 0)")
    check = sub.add_parser(
        "check", help="run the state-machine campaign and summarise it",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the kit's campaign: the state machines and the contract's engine checks against an "
                    "engine factory (--engine), the coordinator machines against a coordinator factory "
                    "(--coordinator) or a coordinator program in any language (--coordinator-cmd). Prints a "
                    "table a machine a row, then what was tested and what to do next. A failing run is "
                    "reduced and saved as a trace, with an HTML timeline beside it.",
        epilog="examples:\n"
               "  fakeshard check --workers 2                         # the kit judging its own fixture\n"
               "  fakeshard check --engine mypkg.adapter:make         # your engine, in process\n"
               "  fakeshard check --coordinator-cmd 'node router.mjs'  # your coordinator program\n"
               "\n"
               "exit codes: 0 passed; 1 a failure found (or a whole ci campaign missed a probe, or coverage\n"
               "under --min-branch-coverage); 2 a usage error, named in one line before anything runs.")
    add_campaign_options(check)
    replay = sub.add_parser("replay", help="replay saved traces step by step")
    replay.add_argument("traces", nargs="+", type=Path, metavar="TRACE")
    replay.add_argument("--engine", default=None, help="engine factory module:callable")
    replay.add_argument("--coordinator", default=None, metavar="MODULE:CALLABLE",
                        help="replay coordinator traces with this coordinator instead of the one they name")
    replay.add_argument("--coordinator-cmd", default=None, metavar="'CMD ARGS'",
                        help="run program traces again against this coordinator program instead of the one "
                             "they name (in real time: the same scenario, not the same interleaving)")
    replay.add_argument("--html", default=None, type=Path, metavar="OUT.html",
                        help="also write the trace's timeline, one self-contained HTML page (one trace only)")
    serve = sub.add_parser("serve", help="run the nodes of a topology file on real sockets (HTTP API v1)")
    serve.add_argument("topology", type=Path, metavar="TOPOLOGY.json")
    serve.add_argument("--host", default="127.0.0.1", help="address every listener binds (default 127.0.0.1)")
    serve.add_argument("--roster", type=Path, default=None, help="also write the roster JSON to this file")
    serve.add_argument("--time-scale", type=float, default=1.0,
                       help="real seconds per second of Delay (default 1; 0: delays take no real time)")
    serve.add_argument("--no-fault-plans", action="store_true",
                       help="refuse fault plans (501 not_supported), as a host that serves only the least the "
                            "contract asks: the kit then applies each plan itself, in front of the nodes")
    schema = sub.add_parser("schema", help="print the JSON Schemas of the wire and HTTP API v1")
    schema.add_argument("name", nargs="?", default=None, help="one schema (default: all, under $defs)")
    return parser


def parser() -> argparse.ArgumentParser:
    """The ``fakeshard`` command's parser (the documentation site renders it)."""
    return _parser()


def campaign_options(args: argparse.Namespace) -> "CheckOptions":
    """The campaign that options from :func:`add_campaign_options` ask for."""
    from fakeshard._check import COORDINATOR_MACHINES, PROGRAM_MACHINE, CheckError, CheckOptions
    from fakeshard._factory import option_or_env, resolve_factory_name

    coordinator = option_or_env(args.coordinator, "FAKESHARD_COORDINATOR")
    program = option_or_env(args.coordinator_cmd, "FAKESHARD_COORDINATOR_CMD")
    given_program = args.coordinator_cmd is not None
    machines = args.machines or ((PROGRAM_MACHINE,) if given_program else
                                 COORDINATOR_MACHINES if args.coordinator is not None else CheckOptions.machines)
    # An option that none of the campaign's machines reads is refused, rather than left unused: a
    # campaign never passes without testing what it was given.
    for option, given, readers in (("--coordinator-cmd", given_program, (PROGRAM_MACHINE,)),
                                   ("--request-timeout", args.request_timeout is not None, (PROGRAM_MACHINE,)),
                                   ("--coordinator", args.coordinator is not None, COORDINATOR_MACHINES),
                                   ("--availability", args.availability is not None, ("concurrent", PROGRAM_MACHINE))):
        if given and not set(readers) & set(machines):
            raise CheckError(f"{option} is for the {' and '.join(readers)} machine{'s' if len(readers) > 1 else ''}, "
                             f"which this campaign does not run (its machines: {','.join(machines)})")
    engine_url, engine_cmd = getattr(args, "engine_url", None), getattr(args, "engine_cmd", None)
    hosts = [o for o, v in (("--engine-url", engine_url), ("--engine-cmd", engine_cmd)) if v is not None]
    if len(hosts) > 1 or (hosts and args.engine is not None):
        raise CheckError(f"{' and '.join((['--engine'] if args.engine is not None else []) + hosts)} each name the "
                         "engine under test: give one (--engine a factory in process, --engine-url a running "
                         "host, --engine-cmd a command that starts one)")
    return CheckOptions(
        engine_url=engine_url, engine_cmd=engine_cmd,
        profile=args.profile, seed=args.seed, examples=args.examples, steps=args.steps,
        machines=machines, coordinator=coordinator, engine=resolve_factory_name(args.engine), workers=args.workers,
        out=args.out, traces=args.traces or _env_path("FAKESHARD_TRACES_DIR"),
        min_branch_coverage=args.min_branch_coverage, coverage=args.coverage, certify=args.certify,
        database=args.database or os.environ.get("FAKESHARD_DATABASE") or None,
        availability=args.availability, coordinator_cmd=program, request_timeout=args.request_timeout,
        junit_xml=getattr(args, "junit_xml", None), known_failing=getattr(args, "known_failing", None),
    )


def _env_path(name: str) -> "Path | None":
    value = os.environ.get(name)
    return Path(value) if value else None


def _check(args: argparse.Namespace) -> int:
    import json

    from fakeshard._check import run_check, summary_json, summary_table, what_was_tested

    result = run_check(campaign_options(args))
    out = sys.stdout
    out.write(summary_table(result) + "\n\n")
    _check_header(out, result)
    out.write(what_was_tested(result) + "\n")
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(summary_json(result), indent=2) + "\n", encoding="utf-8")
        out.write(f"summary written to {args.json_out}\n")
    return _check_verdict(out, result)


def _check_header(out: TextIO, result: "CheckResult") -> None:
    """What ran, on what, how it was judged, the probes reached, the coverage and the time."""
    from fakeshard._check import engine_label, required_probes

    out.write(f"engine: {engine_label(result.options)} (evidence class: {result.evidence_class}"
              f"{'; fixture evidence, not real-model certification' if result.evidence_class == 'fixture' else ''})\n")
    if result.faults_applied_by is not None:
        out.write(f"faults applied by: {result.faults_applied_by}\n")
    if result.judged_by is not None:
        out.write(f"judged: {result.judged_by}\n")
    # Of the probes the engine's lengths allow (a real model's shorter prompts reach fewer).
    required = required_probes(result.longest)
    if result.probes_required:  # a whole ci campaign of the engine machines (check.full_ci)
        unreached = f"; unreached: {', '.join(result.missing_probes)}" if result.missing_probes else ""
    else:
        unreached = " (not a whole ci campaign of the engine machines: not held to every probe)"
    out.write(f"probes reached: {len(set(result.probes) & required)}/{len(required)}{unreached}\n")
    if result.coverage:
        # The kit's own coverage means something to the kit's developers, not to a user: measured when asked.
        c = result.coverage
        out.write(f"coverage of fakeshard/ from the campaign: {c['branch_percent']:.1f}% of branches "
                  f"({c['covered_branches']}/{c['branches']}), {c['percent']:.1f}% combined; "
                  f"reports: {c['json']}, {c['html']}\n")
    out.write(f"elapsed: {result.elapsed:.1f}s\n")


def _check_verdict(out: TextIO, result: "CheckResult") -> int:
    """Each reason the campaign failed, in words; its exit status (0 passed, 1 failed)."""
    status = 0
    if result.failed:
        passing = result.known_passed
        if passing:
            out.write(f"FAILED: {len(passing)} check{'s' if len(passing) != 1 else ''} listed in --known-failing "
                      f"{result.options.known_failing} now pass: take {'them' if len(passing) != 1 else 'it'} "
                      "off the list\n")
        if not passing or result.failed_tests > len(passing) or any(m["failed"] and m["machine"] not in result.known
                                                                   for m in result.machines):
            out.write("FAILED: the campaign found a failure (see the traces above); pytest's last lines:\n")
        out.write(result.pytest_tail + "\n")
        status = 1
    if not result.probes_ok:
        if result.missing_probes:
            out.write(f"FAILED: a whole ci campaign must reach every probe; unreached: "
                      f"{', '.join(result.missing_probes)}\n")
        if result.impossible_probes:
            out.write(f"FAILED: reached crossings the contract makes impossible (the engine or the list "
                      f"is wrong): {', '.join(result.impossible_probes)}\n")
        status = 1
    if not result.coverage_ok:
        out.write(f"FAILED: branch coverage {result.coverage.get('branch_percent', 0):.1f}% is below "
                  f"--min-branch-coverage {result.options.min_branch_coverage}\n")
        status = 1
    return status


def _replay(args: argparse.Namespace) -> int:
    from fakeshard._factory import FactoryError, load_factory, resolve_factory_name

    try:
        from fakeshard.testing._registry import Replaying, history, run_again
        from fakeshard.testing._view import write_html
    except ImportError as exc:
        raise _Fail(f"replay needs the extra 'test' (pip install 'fakeshard[test]'): {exc}") from None
    from fakeshard.testing._trace import Trace

    name = resolve_factory_name(args.engine)
    try:
        factory = load_factory(name)
    except FactoryError as exc:
        raise _Fail(str(exc)) from None
    if args.coordinator:
        from fakeshard.testing._coordinator_machine import CoordinatorError, load_coordinator

        try:
            load_coordinator(args.coordinator)
        except CoordinatorError as exc:
            raise _Fail(str(exc)) from None
    if args.coordinator_cmd is not None:
        from fakeshard.testing._program import command_problem

        problem = command_problem(args.coordinator_cmd)
        if problem is not None:
            raise _Fail(problem)
    if args.html is not None and len(args.traces) != 1:
        raise _Fail(f"--html writes one trace's timeline; {len(args.traces)} traces were given")
    traces = []
    for path in args.traces:
        try:
            traces.append((path, Trace.load(path)))
        except FileNotFoundError:
            raise _Fail(f"no trace file {path}") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise _Fail(f"{path} is not a readable fakeshard trace: {exc}") from None
    replaying = Replaying(factory, name, getattr(factory, "tolerance", 0.0), coordinator=args.coordinator,
                          coordinator_cmd=args.coordinator_cmd)
    if args.html is not None:
        path, trace = traces[0]
        try:
            written = write_html(history(trace, replaying), args.html)
        except OSError as exc:
            raise _Fail(f"cannot write {args.html}: {exc}") from None
        sys.stderr.write(f"timeline of {path} written to {written}\n")
    status = 0
    for path, trace in traces:
        again = run_again(path, trace, replaying)
        sys.stdout.write(again.report + "\n")
        status |= int(again.failed)
    return status


class _Fail(Exception):
    """A one-line error for the user."""


def _schema(args: argparse.Namespace) -> int:
    import json

    from fakeshard._schema import document, schema

    try:
        out = document() if args.name is None else schema(args.name)
    except KeyError as exc:
        raise _Fail(exc.args[0]) from None
    sys.stdout.write(json.dumps(out, indent=1) + "\n")
    return 0


def _serve(args: argparse.Namespace) -> int:
    try:
        from fakeshard.server import run_server
    except ImportError as exc:
        raise _Fail(f"serve needs the extra 'serve' (pip install 'fakeshard[serve]'): {exc}") from None
    from fakeshard._factory import FactoryError
    from fakeshard._topology import Topology, TopologyError

    if not args.time_scale >= 0:
        raise _Fail(f"--time-scale must be >= 0, got {args.time_scale}")
    try:
        topology = Topology.load(args.topology)
        if args.no_fault_plans and any(node.faults is not None and node.faults.rules for node in topology.nodes):
            raise _Fail("--no-fault-plans: the topology gives a node a fault plan")
        return run_server(topology, host=args.host, roster=args.roster, time_scale=args.time_scale,
                          out=sys.stdout, fault_plans=not args.no_fault_plans)
    except (TopologyError, FactoryError) as exc:
        raise _Fail(str(exc)) from None
    except OSError as exc:
        raise _Fail(f"cannot listen: {exc.strerror or exc}") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            from fakeshard._demo import run_demo

            return run_demo(sys.stdout, seed=args.seed)
        if args.command == "check":
            return _check(args)
        if args.command == "replay":
            return _replay(args)
        if args.command == "serve":
            return _serve(args)
        if args.command == "schema":
            return _schema(args)
    except _Fail as exc:
        sys.stderr.write(f"fakeshard: error: {exc}\n")
        return 2
    except Exception as exc:
        from fakeshard._check import CheckError

        if isinstance(exc, CheckError):
            sys.stderr.write(f"fakeshard: error: {exc}\n")
            return 2
        raise
    raise AssertionError(args.command)  # pragma: no cover - argparse refuses others
