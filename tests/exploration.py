"""Coverage of a random exploration (the Hypothesis state machines): what a run must have reached.

A state machine's run draws its steps at random, so a sound build can, now and then, finish a run
without reaching one of the things the test is about (no successful grant in 40 examples, fewer
claims than usual). Asserting that after one run fails by chance; not asserting it lets a build that
can no longer reach them pass. So the exploration goes on, a bounded number of times, while
something is missing, and the test fails only if it is still missing after all of them.
"""

from __future__ import annotations

from collections.abc import Callable


def explore_until_covered(run_once: Callable[[], None], missing: Callable[[], list[str]], *,
                          rounds: int = 3) -> list[str]:
    """Call `run_once` (one exploration, adding to the totals `missing` reads) until `missing()` is
    empty, at most `rounds` times; returns what is still missing."""
    gaps: list[str] = []
    for _ in range(rounds):
        run_once()
        gaps = missing()
        if not gaps:
            break
    return gaps
