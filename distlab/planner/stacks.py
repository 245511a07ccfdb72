"""What a named training stack ships (distlab/data/stacks.toml): `distlab plan --framework NAME` keeps to it.

The planner's search knows every technique its cost model prices (chapter 12); a reader runs one stack, and a
plan that needs a schedule or a ZeRO mode the stack does not have is no answer for them. `allows(stack, plan)`
is the filter the search applies; `check(stack, training)` refuses a switch the stack lacks (TP overlap).
Framework "any" means any ONE stack: a plan is admissible only when at least one stack of stacks.toml runs all of
its features together (`runners`); a combination no stack ships (Megatron's ZeRO-1 with torchtitan's ZB-H1, say)
is no plan anyone can launch. UNRESTRICTED (`distlab plan --framework unrestricted`) lifts that, to show what the
cost model would pick from every technique at once.

Pure Python: the planner runs in the browser.
"""

from __future__ import annotations

import functools

from distlab.core.facts import entries
from distlab.planner.config import STACKS, Plan, Training

UNRESTRICTED = "unrestricted"
"""`--framework unrestricted`: every technique the cost model prices, combined freely (no stack need ship it)."""


def named() -> tuple[str, ...]:
    """The stacks of stacks.toml, in its order."""
    return tuple(STACKS[1:])


@functools.cache
def features(stack: str) -> dict:
    """The stack's row of stacks.toml (schedules, zero, zero_with_pp, offload, tp, pp, tp_overlap, cp, ep)."""
    if stack not in STACKS or stack == "any":
        raise ValueError(f"framework must be one of {', '.join(STACKS[1:])} to have features, not {stack!r}")
    return entries("stacks")[stack]


def allows(stack: str, p: Plan, tp_overlap: bool = False) -> bool:
    """Can this stack run plan p as the planner prices it (with TP overlap, if asked)? "any": can one of them?"""
    if stack == "any":
        return any(allows(s, p, tp_overlap) for s in named())
    f = features(stack)
    if tp_overlap and p.tp > 1 and not f["tp_overlap"]:
        return False
    if (p.tp > 1 and not f["tp"]) or (p.pp > 1 and not f["pp"]) or (p.cp > 1 and not f["cp"]):
        return False
    if p.ep > 1 and not f["ep"]:
        return False
    if p.pp > 1 and p.schedule not in f["schedules"]:
        return False
    return p.zero in (f["zero_with_pp"] if p.pp > 1 else f["zero"]) and p.offload in f["offload"]


def runners(p: Plan, t: Training) -> tuple[str, ...]:
    """The stacks that run plan p with t's switches (only t.framework itself when it names one); may be empty
    for a plan an unrestricted search found."""
    stacks = named() if t.framework == "any" else (t.framework,)
    return tuple(s for s in stacks if allows(s, p, t.tp_overlap))


def check(t: Training) -> None:
    """A switch of the request the stack does not ship: ValueError, one line."""
    if t.framework != "any" and t.tp_overlap and not features(t.framework)["tp_overlap"]:
        raise ValueError(f"{t.framework} ships no TP communication overlap: drop --tp-overlap")


def describe(stack: str) -> str:
    """One line: what the stack allows, for the explanation."""
    if stack == "any":
        return f"any one stack ({', '.join(named())}): a plan only if one of them runs all of its features together"
    if stack == UNRESTRICTED:
        return (
            "unrestricted: every schedule, ZeRO stage and offload the cost model prices, whether or not one stack "
            "ships them together"
        )
    f = features(stack)
    zero = "/".join(map(str, f["zero"]))
    pp = f"; schedules {', '.join(f['schedules'])}, ZeRO {'/'.join(map(str, f['zero_with_pp']))} with a pipeline"
    return (
        f"{stack}: TP {'yes' if f['tp'] else 'no'}, PP {'yes' if f['pp'] else 'no'}"
        + (pp if f["pp"] else "")
        + f"; ZeRO {zero}; offload {', '.join(f['offload'])}; TP overlap {'available' if f['tp_overlap'] else 'no'}"
    )
