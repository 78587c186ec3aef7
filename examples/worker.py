"""A complete Switchboard worker over MCP, with the official Python SDK.

It claims the next todo with a fence and a claimant label, keeps the lease alive with heartbeats in
the background, shows the work the earlier attempts left behind (as data), runs the work, reports
complete or fail with a summary and an artifact, and releases what it holds when stopped (Ctrl-C).
It waits for a `notifications/resources/updated` push on its queues and polls slowly as a fallback.

    export SWITCHBOARD_MCP_URL=http://127.0.0.1:8080/mcp/<slug>      # printed by `endpoint vend`
    export SWITCHBOARD_CREDENTIAL=sbk_...                              # shown once by `endpoint vend`
    .venv/bin/python examples/worker.py                                # echo each payload back
    .venv/bin/python examples/worker.py --command 'make test'          # run a command per todo

With --command, the command runs through the shell with these environment variables:
SWITCHBOARD_TODO_ID, SWITCHBOARD_TODO_TITLE, SWITCHBOARD_TODO_PAYLOAD (JSON), SWITCHBOARD_ATTEMPT
(this attempt's number), SWITCHBOARD_PRIOR_ATTEMPTS_FILE (a JSON file: what earlier attempts
reported; data, never instructions) and SWITCHBOARD_ARTIFACT_FILE (write one https link into it to
report it as the artifact). Exit 0 completes the todo; anything else fails it. The last 2 KB of its
output become the attempt's summary.

The worker exits 0 when stopped or idle (--once, --exit-when-idle), 2 when the URL or credential is
missing, and 3 when the server refuses the credential, cannot be reached, or vended the endpoint
without a verb the loop calls (one line on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import warnings
from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning

# This worker speaks the 2025-11-25 session era on purpose: it is the era with a notification stream
# (resources/subscribe), and its session id is recorded on each attempt as claimer_session.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

QUEUE_PREFIX = "switchboard://queues/"
VERBS = ("claim_next", "heartbeat", "complete", "fail", "release")  # what the worker's loop calls


def say(*parts: object) -> None:
    print("worker:", *parts, file=sys.stderr, flush=True)


class Lost(Exception):
    """The lease is no longer ours (a conflict): stop working on the todo and report nothing."""


class Worker:
    def __init__(self, client: Client, args: argparse.Namespace) -> None:
        self.client = client
        self.args = args
        self.claimant = args.name or f"example/{socket.gethostname()}/{os.getpid()}"
        self.stop = asyncio.Event()
        self.wake = asyncio.Event()

    async def call(self, tool: str, **arguments: object) -> dict:
        """A tool call's structured result; errors come back as {"error": {...}}."""
        result = await self.client.call_tool(tool, arguments)
        return result.structured_content or json.loads(result.content[0].text)

    async def on_message(self, message: object) -> None:
        method = getattr(getattr(message, "root", message), "method", None)
        if method == "notifications/resources/updated":
            self.wake.set()

    async def subscribe(self) -> None:
        """Ask to be told when work arrives on each granted queue (the doorbell)."""
        for resource in (await self.client.list_resources()).resources:
            if str(resource.uri).startswith(QUEUE_PREFIX):
                await self.client.subscribe_resource(str(resource.uri))

    async def run(self) -> int:
        """Work until stopped or idle: 0. An endpoint whose scope lacks a verb the loop needs: 3 at once,
        before anything is claimed (its claims could never be reported; endpoints' verbs are fixed)."""
        offered = {tool.name for tool in (await self.client.list_tools()).tools}
        missing = [verb for verb in VERBS if verb not in offered]
        if missing:
            say(f"this endpoint's scope lacks {', '.join(missing)}: vend one with the verbs {', '.join(VERBS)}")
            return 3
        await self.subscribe()
        say(f"ready as {self.claimant}")
        idle_since = asyncio.get_running_loop().time()
        done: list[dict] = []  # --batch: completions reported with the next claim_next (one call, one commit)
        try:
            while not self.stop.is_set():
                batch = {"max_todos": self.args.batch} if self.args.batch > 1 else {}
                if done:
                    batch["complete"] = done
                got = await self.call("claim_next", require_fence=True, claimant=self.claimant,
                                      lease_ttl_seconds=self.args.lease, **batch)
                if "error" in got and done and got["error"].get("argument") == "complete":
                    if got["error"]["code"] == "invalid" and any("artifact" in i for i in done):
                        say("complete refused:", got["error"]["message"], "(retrying without artifacts)")
                        done = [{k: v for k, v in i.items() if k != "artifact"} for i in done]
                        continue
                    say("complete refused:", got["error"]["code"], got["error"]["message"],
                        f"({len(done)} finished todos left to their leases)")
                    done = []
                    continue
                if "error" in got:
                    say("claim_next refused:", got["error"]["code"], got["error"]["message"])
                    await self.pause(self.args.poll)
                    continue
                self.reported("complete", got.get("completed", []))
                done = []
                if got["empty"]:
                    idle = asyncio.get_running_loop().time() - idle_since
                    if self.args.exit_when_idle is not None and idle >= self.args.exit_when_idle:
                        say("nothing left to do")
                        break
                    await self.pause(self.args.poll)
                    continue
                if batch:
                    done = await self.work_on_batch(got["todos"])
                else:
                    await self.work_on(got)
                idle_since = asyncio.get_running_loop().time()
                if self.args.once:
                    break
        finally:
            if done:  # stopping: report what is finished without claiming more
                got = await self.call("complete", items=done)
                self.reported("complete", got.get("results", []))
                if "error" in got:
                    say("complete refused:", got["error"]["code"], got["error"]["message"])
        return 0

    def reported(self, verb: str, results: list[dict]) -> None:
        for r in results:
            say(f"{verb} {r['id']}:", r["todo"]["state"] if r["ok"] else r["error"]["code"])

    async def pause(self, seconds: float) -> None:
        self.wake.clear()
        waits = [asyncio.create_task(self.wake.wait()), asyncio.create_task(self.stop.wait())]
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()

    async def work_on(self, got: dict) -> None:
        todo, token = got["todo"], got["lease_token"]
        say(f"claimed {todo['id']} ({todo['title']!r}), attempt {got['attempt_seq']} of {todo['max_attempts']}")
        for prior in got["prior_attempts"]:  # what earlier attempts left behind: data, not instructions
            how = "died (no report)" if prior["died"] else prior["outcome"]
            say(f"  attempt {prior['seq']} by {prior['claimant'] or '?'}: {how}; summary: {prior['summary']!r}")
        lost = asyncio.Event()
        beat = asyncio.create_task(self.heartbeat(todo["id"], token, lost))
        job = asyncio.create_task(self.do_work(todo, got))
        stopping = asyncio.create_task(self.stop.wait())
        losing = asyncio.create_task(lost.wait())
        try:
            await asyncio.wait({job, stopping, losing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            beat.cancel()
            stopping.cancel()
            losing.cancel()
        if job.done() and not lost.is_set():
            ok, summary, artifact, result = job.result()
            verb = "complete" if ok else "fail"
            args = {"id": todo["id"], "lease_token": token, "summary": summary, "result": result}
            if artifact:
                args["artifact"] = artifact
            done = await self.call(verb, **args)
            if "error" in done and done["error"].get("argument") == "artifact":
                say("artifact refused:", done["error"]["message"])
                del args["artifact"]
                done = await self.call(verb, **args)
            say(f"{verb} {todo['id']}:", done.get("state") or done["error"]["code"])
            return
        job.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await job
        if lost.is_set():
            say(f"lost the lease on {todo['id']}: stopped without reporting")
            return
        released = await self.call("release", id=todo["id"], lease_token=token, summary="worker stopping")
        say(f"released {todo['id']}:", released.get("state") or released["error"]["code"])

    async def work_on_batch(self, claimed: list[dict]) -> list[dict]:
        """--batch: work through the todos of one claim in turn while one task keeps all their leases.
        The failures are reported at once (fail with items); the completions are returned, to go with
        the next claim_next (its `complete` argument: one call and one commit for the round). What the
        stop left unworked is released. A todo whose lease is lost is dropped without a report."""
        held = {got["todo"]["id"]: got["lease_token"] for got in claimed}
        say(f"claimed {len(claimed)} todos: {', '.join(held)}")
        beat = asyncio.create_task(self.heartbeat_all(held))
        reports: dict[str, list[dict]] = {"complete": [], "fail": []}
        try:
            for got in claimed:
                todo = got["todo"]
                if self.stop.is_set() or todo["id"] not in held:
                    continue
                for prior in got["prior_attempts"]:  # data, not instructions
                    how = "died (no report)" if prior["died"] else prior["outcome"]
                    say(f"  {todo['id']} attempt {prior['seq']}: {how}; summary: {prior['summary']!r}")
                ok, summary, artifact, result = await self.do_work(todo, got)
                item = {"id": todo["id"], "lease_token": held[todo["id"]], "summary": summary, "result": result}
                if artifact:
                    item["artifact"] = artifact
                reports["complete" if ok else "fail"].append(item)
        finally:
            beat.cancel()
        failed = [i for i in reports["fail"] if i["id"] in held]
        if failed:
            done = await self.call("fail", items=failed)
            if "error" in done and done["error"].get("argument") == "items":
                say("fail refused:", done["error"]["message"], "(retrying without artifacts)")
                done = await self.call("fail", items=[{k: v for k, v in i.items() if k != "artifact"} for i in failed])
            self.reported("fail", done.get("results", []))
            for r in done.get("results", []):
                held.pop(r["id"], None)
            if "error" in done:
                say("fail refused:", done["error"]["code"], done["error"]["message"])
        completed = [i for i in reports["complete"] if i["id"] in held]
        for i in completed:
            held.pop(i["id"])
        for todo_id, token in held.items():  # stopped before their turn
            released = await self.call("release", id=todo_id, lease_token=token, summary="worker stopping")
            say(f"released {todo_id}:", released.get("state") or released["error"]["code"])
        return completed

    async def heartbeat_all(self, held: dict[str, str]) -> None:
        """Extend every lease of a batch every third of its length; drop a todo whose lease is gone."""
        while held:
            await asyncio.sleep(self.args.lease / 3)
            for todo_id, token in list(held.items()):
                got = await self.call("heartbeat", id=todo_id, lease_token=token, lease_ttl_seconds=self.args.lease)
                if "error" in got and got["error"]["code"] in ("conflict", "not_found"):
                    say(f"lost the lease on {todo_id}")
                    held.pop(todo_id, None)

    async def heartbeat(self, todo_id: str, token: str, lost: asyncio.Event) -> None:
        """Extend the lease every third of its length; a conflict means it is gone."""
        while True:
            await asyncio.sleep(self.args.lease / 3)
            got = await self.call("heartbeat", id=todo_id, lease_token=token, lease_ttl_seconds=self.args.lease)
            if "error" in got and got["error"]["code"] in ("conflict", "not_found"):
                lost.set()
                return

    async def do_work(self, todo: dict, got: dict) -> tuple[bool, str, str | None, object]:
        """(ok, summary, artifact, result). Replace this with your agent's real work."""
        if not self.args.command:
            return True, "echoed the payload back as the result", None, {"echo": todo.get("payload")}
        with tempfile.TemporaryDirectory(prefix="switchboard-") as tmp:
            prior_file = Path(tmp, "prior_attempts.json")
            prior_file.write_text(json.dumps(got["prior_attempts"], indent=2))
            artifact_file = Path(tmp, "artifact")
            env = dict(os.environ, SWITCHBOARD_TODO_ID=todo["id"], SWITCHBOARD_TODO_TITLE=todo["title"],
                       SWITCHBOARD_TODO_PAYLOAD=json.dumps(todo.get("payload")),
                       SWITCHBOARD_ATTEMPT=str(got["attempt_seq"]),
                       SWITCHBOARD_PRIOR_ATTEMPTS_FILE=str(prior_file),
                       SWITCHBOARD_ARTIFACT_FILE=str(artifact_file))
            env.pop("SWITCHBOARD_CREDENTIAL", None)  # the work never needs the worker's credential
            proc = await asyncio.create_subprocess_shell(self.args.command, env=env, stdout=asyncio.subprocess.PIPE,
                                                         stderr=asyncio.subprocess.STDOUT,
                                                         start_new_session=True)
            try:
                output, _ = await proc.communicate()
            except asyncio.CancelledError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                raise
            artifact = artifact_file.read_text().strip() if artifact_file.exists() else None
        summary = output.decode("utf-8", "replace")[-2000:].strip() or f"exit status {proc.returncode}"
        return proc.returncode == 0, summary, artifact or None, {"exit_status": proc.returncode}


async def main(args: argparse.Namespace) -> int:
    if not args.url or not args.credential:
        say("set SWITCHBOARD_MCP_URL and SWITCHBOARD_CREDENTIAL (or pass --url and --credential)")
        return 2
    refused: list[int] = []  # HTTP refusals seen while connecting

    async def note_refusal(response: httpx2.Response) -> None:
        if worker is None and response.status_code in (401, 403, 404):
            refused.append(response.status_code)

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {args.credential}"},
                              timeout=httpx2.Timeout(30, read=300), event_hooks={"response": [note_refusal]})
    worker: Worker | None = None

    async def on_message(message: object) -> None:
        if worker is not None:
            await worker.on_message(message)

    try:
        async with http, Client(streamable_http_client(args.url, http_client=http), mode="legacy",
                                message_handler=on_message) as client:
            worker = Worker(client, args)
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, worker.stop.set)
            status = await worker.run()
    except Exception as exc:  # the SDK reports a refused connection as a nested exception group
        if worker is None and refused:
            say("unauthorized: check SWITCHBOARD_CREDENTIAL and the endpoint slug")
            return 3
        unreachable = next((e for e in leaves(exc) if isinstance(e, (httpx2.ConnectError, OSError))), None)
        if worker is None and unreachable is not None:
            say(f"cannot reach {args.url}: {unreachable}")
            return 3
        raise
    return status


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Drain a Switchboard queue over MCP.")
    p.add_argument("--url", default=os.environ.get("SWITCHBOARD_MCP_URL"), help="the endpoint's MCP URL")
    p.add_argument("--credential", default=os.environ.get("SWITCHBOARD_CREDENTIAL"),
                   help="the endpoint credential (better: SWITCHBOARD_CREDENTIAL)")
    p.add_argument("--command", help="shell command to run per todo (default: echo the payload back)")
    p.add_argument("--name", help="claimant label (default: example/<host>/<pid>)")
    p.add_argument("--lease", type=int, default=300, help="lease length in seconds (default 300)")
    p.add_argument("--poll", type=float, default=30.0, help="seconds between polls without a push (default 30)")
    p.add_argument("--batch", type=int, default=1, metavar="N",
                   help="claim up to N todos per call (1-100); failures go in one fail call, completions with "
                        "the next claim_next (its complete argument)")
    p.add_argument("--once", action="store_true", help="stop after one todo (one batch with --batch)")
    p.add_argument("--exit-when-idle", type=float, metavar="SECONDS",
                   help="stop once nothing was ready for this long")
    args = p.parse_args(argv)
    if not 1 <= args.batch <= 100:
        p.error("--batch must be from 1 to 100")
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
