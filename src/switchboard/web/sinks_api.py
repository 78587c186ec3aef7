"""The notification sink sender as a component of the app: its lifecycle and its sweep-tick hook.

The sinks' routes (`/api/v1/sinks…`, a human's own, and `/api/v1/teams/{team}/sinks…`, a team's) are
operations of the human API's table (`web/api/routes.py`), in its OpenAPI document with the others.
"""

from __future__ import annotations

from ..runtime import Component
from .sinks import SinkSender


def component(sender: SinkSender) -> Component:
    """The sender's start and stop, and its stuck-queue and digest check on the sweep tick."""
    return Component(name="sinks", start=sender.start, stop=sender.stop, on_tick=sender.on_tick)
