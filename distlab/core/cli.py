"""The `distlab` command: run experiments and the calculators behind the site.

Subcommands are found in distlab's source by their `@command("name", "help")` decorator, so adding a
calculator touches only its own module. Bad input prints one line and exits 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import re
import sys
import time
import warnings
from collections.abc import Callable, Sequence

from distlab.core import sources

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
    """argparse that reports a usage error as one line and exit 2 (argparse prints usage too), and reads "-7e9"
    or "-inf" as a (negative) value, which the option's type then refuses by name ("must be positive"), instead
    of taking it for an unknown option ("expected one argument"). Abbreviated options are refused: argparse's
    prefix matching once read `distlab plan --gpus 64` as `--gpus-per-node 64` and planned one 64-GPU node."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(
            r"^-([0-9][0-9_]*\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$|^-(inf|infinity|nan)$", re.I
        )

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message}")


def parser(name: str, description: str) -> Parser:
    return Parser(prog=f"distlab {name}", description=description, formatter_class=argparse.RawDescriptionHelpFormatter)


# ASCII digits only ([0-9], not \d, which also matches '٧' and '７'); underscores as thousands separators.
_ASCII_NUMBER = re.compile(
    r"^[-+]?([0-9][0-9_]*\.?[0-9_]*|\.[0-9][0-9_]*)([eE][-+]?[0-9]+)?$|^[-+]?(inf|infinity|nan)$", re.I
)

# The meaningful range of the calculators' inputs: beyond these nothing real exists and the arithmetic only
# overflows. A value past them is refused with "must be at most ...".
MAX_GPUS = 2**20  # a million accelerators, several times the largest cluster built
MAX_PARAMS = 1e15  # a thousand times today's largest dense models
MAX_TOKENS = 2**30  # tokens in one sequence or micro-batch dimension
MAX_BYTES = 1e18  # an exabyte in one message or buffer
MAX_WIDTH = 2**20  # hidden sizes, heads, layers


def number(
    kind: type = float, *, minimum: float | None = None, maximum: float | None = None, strict_minimum: bool = False
) -> Callable[[str], float]:
    """argparse type: a finite number in [minimum, maximum] written in ASCII (7e9, 7_000_000_000, 0.5; not
    '٧' or '７', which Python's float() would accept). Integers must be whole. Each refusal is one line that
    says what is wrong: "is not a number", "is not a finite number", "must be positive", "must be at most X"."""

    def parse(text: str):
        if not _ASCII_NUMBER.match(text.strip()):
            raise argparse.ArgumentTypeError(f"{text!r} is not a number")
        plain = text.strip().replace("_", "")
        value = float(plain)
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if kind is int:
            if not value.is_integer():
                raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
            value = int(value)
        if minimum is not None and (value <= minimum if strict_minimum else value < minimum):
            words = (
                "must be positive"
                if (minimum == 0 and strict_minimum)
                else (f"must be more than {minimum:g}" if strict_minimum else f"must be at least {minimum:g}")
            )
            raise argparse.ArgumentTypeError(f"{text!r} {words}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{text!r} must be at most {maximum:g}")
        return value

    parse.__name__ = f"{kind.__name__}"
    return parse


def positive(kind: type = float, maximum: float | None = None) -> Callable[[str], float]:
    """argparse type: a finite number > 0, at most `maximum` (accepts 7e9 and 7_000_000_000 for integers)."""
    return number(kind, minimum=0, strict_minimum=True, maximum=maximum)


def non_negative(kind: type = float, maximum: float | None = None) -> Callable[[str], float]:
    """argparse type: a finite number >= 0, at most `maximum`."""
    return number(kind, minimum=0, maximum=maximum)


def _non_finite(obj, path: str = "") -> str | None:
    """The first key whose value is inf or nan, anywhere in a result."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return path or "the result"
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for k, v in items:
        found = _non_finite(v, f"{path}.{k}" if path else str(k))
        if found:
            return found
    return None


def emit(obj: dict | list, as_json: bool, text: str) -> None:
    """Print `--json` output (stable key order, machine-readable) or the human text. A result that overflowed
    to inf or nan is refused as bad input (exit 2): --json never prints Infinity or NaN, the text never says inf."""
    bad = _non_finite(obj)
    if bad:
        raise UsageError(f"the result overflows ({bad} is not finite): the inputs are too large to answer")
    print(json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) if as_json else text)


def discover_commands() -> dict[str, tuple[str, str]]:
    """name -> (module, help) for every @command in distlab's source, without importing it."""
    return {reg.name: (sources.module_name(path), reg.description) for path, reg in sources.registrations("command")}


# ---------------------------------------------------------------- list and run
@command("list", "list every experiment with a one-line description")
def list_command(argv: list[str]) -> int:
    p = parser("list", "List every experiment: name, kind, where its code is (module:line), what it shows.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    args = p.parse_args(argv)
    from distlab.core.experiments import discover

    exps = sorted(discover().values(), key=lambda e: e.name)
    emit(
        [{"name": e.name, "kind": e.kind, "source": e.source, "description": e.description} for e in exps],
        args.json,
        "\n".join(f"{e.name:<26} {e.kind:<9} {e.source:<48} {e.description}" for e in exps),
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
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # numpy's "overflow encountered" becomes one line
            return _COMMANDS[name](rest)
    except UsageError as exc:
        message = str(exc)
        print(message if message.startswith("distlab") else f"distlab {name}: {message}", file=sys.stderr)
        return EXIT_USAGE
    except (ArithmeticError, RuntimeWarning) as exc:  # inputs so large or small the arithmetic gives out
        print(f"distlab {name}: the inputs are too large or too small to answer ({exc})", file=sys.stderr)
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
