"""The `distlab` command: run experiments and the calculators behind the site.

Subcommands are found in distlab's source by their `@command("name", "help")` decorator, so adding a
calculator touches only its own module. Bad input prints one line and exits 2, never a traceback.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import math
import sys
import time
from collections.abc import Callable, Sequence

from distlab.core.experiments import module_name, source_files

EXIT_USAGE = 2
_COMMANDS: dict[str, Callable] = {}


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def command(name: str, help: str):  # mirrors argparse's word
    """Register `fn(argv: list[str]) -> int` as `distlab NAME`."""

    def register(fn):
        _COMMANDS[name] = fn
        return fn

    return register


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit 2 (argparse prints usage too)."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message}")


def parser(name: str, description: str) -> Parser:
    return Parser(prog=f"distlab {name}", description=description, formatter_class=argparse.RawDescriptionHelpFormatter)


def positive(kind: type = float) -> Callable[[str], float]:
    """argparse type: a finite number > 0 (accepts 7e9 and 7_000_000_000 for integers)."""

    def parse(text: str):
        try:
            value = kind(float(text.replace("_", ""))) if kind is int else kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        except OverflowError:  # int(float("inf"))
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if kind is int and float(text.replace("_", "")) != value:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be positive")
        return value

    parse.__name__ = f"positive {kind.__name__}"
    return parse


def emit(obj: dict | list, as_json: bool, text: str) -> None:
    """Print `--json` output (stable key order, machine-readable) or the human text."""
    print(json.dumps(obj, indent=2, sort_keys=True) if as_json else text)


def discover_commands() -> dict[str, tuple[str, str]]:
    """name -> (module, help) for every @command in distlab's source, without importing it."""
    found = {}
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef):
                for deco in node.decorator_list:
                    if isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "command" and deco.args:
                        name, helptext = (ast.literal_eval(a) for a in deco.args[:2])
                        found[name] = (module_name(path), helptext)
    return found


# ---------------------------------------------------------------- list and run
@command("list", "list every experiment with a one-line description")
def list_command(argv: list[str]) -> int:
    p = parser("list", "List every experiment.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    args = p.parse_args(argv)
    from distlab.core.experiments import discover

    exps = discover()
    emit(
        [{"name": e.name, "kind": e.kind, "description": e.description} for e in exps.values()],
        args.json,
        "\n".join(f"{e.name:<26} {e.kind:<9} {e.description}" for e in exps.values()),
    )
    return 0


@command("run", "run one experiment (or --all): tables and claims; exit 1 when a claim fails")
def run_command(argv: list[str]) -> int:
    p = parser(
        "run",
        "Run an experiment, print its quantities, tables and claims.\n"
        "Exit status: 0 all claims passed, 1 a claim failed, 2 bad input.",
    )
    p.add_argument("name", nargs="?", help="experiment name (see `distlab list`)")
    p.add_argument("--all", action="store_true", help="run every experiment, with progress")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where to measure (default cpu)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-cache", action="store_true", help="re-run even when a cached result exists")
    p.add_argument(
        "--store",
        action="store_true",
        help="also keep the result in results/<hardware>/ (for GPU measurements the site shows)",
    )
    args = p.parse_args(argv)
    from distlab.core import experiments

    if bool(args.name) == bool(args.all):
        raise UsageError("distlab run: give exactly one experiment name, or --all")
    try:
        experiments.check_device(args.device)
    except ValueError as exc:
        raise UsageError(f"distlab run: {exc}") from None
    known = experiments.discover()
    if args.name and args.name not in known:
        raise UsageError(f"distlab run: unknown experiment {args.name!r}; known: {', '.join(sorted(known))}")
    if args.all:
        # On a GPU only measured experiments have anything to measure; computed and simulated ones are
        # the same everywhere and stay with the CPU build.
        names = sorted(n for n, e in known.items() if args.device == "cpu" or e.kind == "measured")
    else:
        names = [args.name]
    results, failed, errors = [], 0, []
    progress = args.all  # one line per experiment on stderr: name, status, time
    for i, name in enumerate(names, 1):
        start = time.perf_counter()
        if progress:
            print(f"[{i}/{len(names)}] {name} ...", end="", file=sys.stderr, flush=True)
        try:
            result, cached = experiments.run(name, args.device, use_cache=not args.no_cache)
        except Exception as exc:  # with --all one broken experiment must not stop the rest
            if not args.all:
                raise
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
            print(
                f" ERROR ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})",
                file=sys.stderr,
                flush=True,
            )
            continue
        if args.store:
            experiments.store(result)
        bad = result.failed_claims
        failed += bool(bad)
        if progress:
            status = "FAILED" if bad else "ok"
            print(
                f" {status} ({'cached' if cached else f'{time.perf_counter() - start:.1f} s'})",
                file=sys.stderr,
                flush=True,
            )
        results.append(result)
    if args.json:
        out = [r.to_json() for r in results]
        emit(out if args.all else out[0], True, "")
    else:
        print("\n\n".join(_describe(r) for r in results))
    if errors:
        print(f"{len(errors)} experiment(s) raised:\n  " + "\n  ".join(errors), file=sys.stderr)
    return 1 if failed or errors else 0


def _describe(r) -> str:
    from distlab.core.formatting import format_quantity

    p = r.provenance
    lines = [
        f"== {r.name} ({r.kind}; {p.get('hardware')}, torch {p.get('torch')}, code {p.get('code_version')}, "
        f"{p.get('date')})"
    ]
    lines += [f"  {k}: {format_quantity(q.value, q.unit)}" for k, q in r.quantities.items()]
    for name, t in r.tables.items():
        lines += ["", f"  table {name}:"] + ["  " + line for line in t.to_markdown().splitlines()]
    lines.append("")
    lines += [f"  [{'PASS' if c.passed else 'FAIL'}] {c.name}: {c.describe()}" for c in r.claims]
    return "\n".join(lines)


# ---------------------------------------------------------------- entry point
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = discover_commands()
    if not argv or argv[0] in ("-h", "--help"):
        width = max(map(len, commands))
        print("usage: distlab COMMAND [options]   (distlab COMMAND --help for each)\n\ncommands:")
        print("\n".join(f"  {n:<{width}}  {h}" for n, (_, h) in sorted(commands.items())))
        return 0 if argv else EXIT_USAGE
    name, rest = argv[0], argv[1:]
    if name not in commands:
        print(f"distlab: unknown command {name!r}; commands: {', '.join(sorted(commands))}", file=sys.stderr)
        return EXIT_USAGE
    importlib.import_module(commands[name][0])
    try:
        return _COMMANDS[name](rest)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:  # validation in configs and calculators: bad input, not a bug
        print(f"distlab {name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `distlab run ... | head`: the reader left; not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    # Run the real module's main: commands defined in other modules register on `distlab.core.cli`,
    # not on this `__main__` copy.
    from distlab.core.cli import main as _main

    sys.exit(_main())
