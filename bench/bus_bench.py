"""Hook bus benchmark (issue 17, part 3): what publishing a bulk push's events costs a serving process,
with the subscribers `switchboard serve` attaches (metrics, the hook and sink senders' wake-ups, the
Board's live hub with no page open, the MCP credential cache), each subscribed one event at a time
(`subscribe`, how they were attached before) or one publish at a time (`subscribe_batch`, how they are
attached now). The events are a bulk push's `create` events (1,000 per publish, two queues).

Variants alternate in rounds so that noise on the shared machine hits both alike; figures are medians
of the rounds, in microseconds per publish of --events events.

    .venv/bin/python bench/bus_bench.py
    .venv/bin/python bench/bus_bench.py --events 1000 --rounds 9 --repeat 50
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from types import SimpleNamespace

from switchboard.config import load_settings
from switchboard.core.events import Event, HookBus
from switchboard.mcp.auth import CredentialCache
from switchboard.web.board.live import LiveHub
from switchboard.web.hooks import HookSender
from switchboard.web.metrics import Metrics
from switchboard.web.sinks import SinkSender


def bulk_events(n: int) -> list[Event]:
    return [Event(verb="create", todo={"id": f"td_{i:08d}", "queue": ("build", "deploy")[i % 2], "state": "pending"},
                  endpoint_id="ep", queue=("build", "deploy")[i % 2], ready="created", source="api")
            for i in range(n)]


def buses() -> dict[str, HookBus]:
    runtime = SimpleNamespace(settings=load_settings(log_format="text"))
    metrics, hooks, sinks = Metrics(), HookSender(runtime), SinkSender(runtime)  # type: ignore[arg-type]
    hub, cache = LiveHub(None), CredentialCache(ttl_seconds=60)  # type: ignore[arg-type]
    each, batch = HookBus(), HookBus()
    for fn in (metrics.on_event, hooks.on_event, sinks.on_event, hub.publish, cache.on_event):
        each.subscribe(fn)
    for fn in (metrics.on_events, hooks.on_events, sinks.on_events, hub.publish_many, cache.on_events):
        batch.subscribe_batch(fn)
    return {"each": each, "batch": batch}


async def main(args: argparse.Namespace) -> None:
    events = bulk_events(args.events)
    variants = buses()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(args.rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            bus = variants[name]
            t0 = time.perf_counter()
            for _ in range(args.repeat):
                await bus.publish(*events)
            times[name].append((time.perf_counter() - t0) / args.repeat * 1e6)
    print(f"hook bus: one publish of {args.events} create events, 5 subscribers; "
          f"medians of {args.rounds} rounds of {args.repeat} publishes")
    for name, xs in times.items():
        print(f"  {name:6s} {statistics.median(xs):10,.0f} us per publish ({min(xs):,.0f} to {max(xs):,.0f})")
    ratio = statistics.median(a / b for a, b in zip(times["each"], times["batch"], strict=True))
    print(f"  each / batch: {ratio:.1f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--repeat", type=int, default=30)
    asyncio.run(main(p.parse_args()))
