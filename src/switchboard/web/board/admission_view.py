"""What the Board shows of a queue's admission policy (SPEC-0030, docs/admission.md), shared by the
team page (`team_pages.py`) and the Queues screen (`queue_pages.py`): the form's values, the status
words, and the screen each queue lives on. The routes that change a policy are in `admission_pages.py`;
the markup is the macros of `templates/admission.html`."""

from __future__ import annotations

from typing import Any

from ...core import admission, inputs

NOTICES = {
    "paused": "The queue is paused: no claim is admitted until it is resumed.",
    "resumed": "The queue is resumed.",
    "policy": "The admission policy is saved.",
    "cleared": "The admission policy is cleared: the queue has no limit now.",
}
STATUS_LABELS = {"open": "open", "paused": "paused", "window_exhausted": "window used up",
                 "in_flight_full": "in-flight cap reached"}
FIELD_LABELS = {"max_in_flight": "Max in flight", "max_claims_per_window": "Max claims per window",
                "period": "Window", "tz": "Time zone", "start": "Window start", "weekday": "Weekday",
                "queue": "Queue", "endpoint": "Endpoint", "paused": "Paused"}


def blank_form(policy: dict[str, Any] | None = None) -> dict[str, str]:
    """The policy form's values: the policy's own, or the defaults for a queue without one."""
    if policy is None:
        return {"max_in_flight": "", "max_claims_per_window": "", "period": "hour", "tz": "UTC",
                "start": "00:00", "weekday": ""}
    w = policy["window"]
    return {"max_in_flight": "" if policy["max_in_flight"] is None else str(policy["max_in_flight"]),
            "max_claims_per_window": ("" if policy["max_claims_per_window"] is None
                                      else str(policy["max_claims_per_window"])),
            "period": w["period"], "tz": w["tz"], "start": w["start"], "weekday": w["weekday"] or ""}


def where(queue: str) -> str:
    """The screen a (checked) queue name lives on: its team's page, or the Queues screen."""
    if inputs.is_team_label(queue):
        slug, _ = inputs.team_label(queue)
        return f"/teams/{slug}"
    return "/queues"


def context(policy_failed: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the policy macros need besides the policies: labels, choices, and the form that was
    refused (`{queue, endpoint, field, values}`), kept open with what was typed."""
    return {"status_labels": STATUS_LABELS, "periods": admission.PERIODS, "weekdays": admission.WEEKDAYS,
            "field_labels": FIELD_LABELS, "policy_failed": policy_failed}


def form_values(policy: dict[str, Any] | None, queue: str, endpoint: str | None,
                failed: dict[str, Any] | None) -> dict[str, str]:
    if failed and failed["queue"] == queue and (failed["endpoint"] or None) == endpoint:
        return dict(failed["values"])
    return blank_form(policy)
