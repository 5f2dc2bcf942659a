"""The ``fakeshard`` command."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fakeshard",
        description="A deterministic fake shard engine for testing LLM pipeline coordinators.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    demo = sub.add_parser("demo", help="run a head/middle/tail pipeline through faults and print each step")
    demo.add_argument("--seed", type=int, default=0, help="engine seed (default 0)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from fakeshard.demo import run_demo

        return run_demo(sys.stdout, seed=args.seed)
    raise AssertionError(args.command)  # pragma: no cover - argparse refuses others
