"""The todo-detail view as an MCP App (`SWITCHBOARD_MCP_APPS=1`, src/switchboard/mcp/apps.py).

- The wire: get_todo's tools/list entry links `ui://switchboard/todo-detail.html`, which is listed and
  read as `text/html;profile=mcp-app` with a CSP that allows no network source; off by default; only
  for endpoints granted get_todo. The links validate against the MCP Apps SDK's JSON Schema, and the
  MCP Inspector's `--app-info` probe reads the link as a host would.
- The build: the committed HTML is what `apps_view/build.mjs` makes from the pinned MCP Apps SDK.
- The render: headless Chromium, the view in a sandboxed iframe, driven by the SDK's host-side
  `AppBridge` with a real get_todo result: attempts newest first, the died one marked, a summary made
  of markup shown as text, an https artifact as a link opened through the host, another artifact as
  text, and no network request from the view.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess

import jsonschema
import pytest
from test_interop import HERE, MODULES, inspector, node

from conftest import ROOT, chromium_path, start_process_server
from mcp_support import body, push, sdk, vend
from switchboard.core import endpoints, sweeps, todos
from switchboard.mcp import apps

BUILD = ROOT / "src" / "switchboard" / "mcp" / "apps_view" / "build.mjs"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MARKUP = '<img src="https://evil.example/x.png" onerror="alert(1)"><b>bold</b>'
HOST = """
import { AppBridge, PostMessageTransport } from "@modelcontextprotocol/ext-apps/app-bridge";
window.openedLinks = [];
window.mountApp = async (html, toolInput, toolResult) => {
  const iframe = document.createElement("iframe");
  iframe.setAttribute("sandbox", "allow-scripts");
  iframe.style.width = "720px"; iframe.style.height = "800px";
  document.body.append(iframe);
  const bridge = new AppBridge(null, { name: "test-host", version: "1.0.0" }, { openLinks: {} });
  bridge.onopenlink = async ({ url }) => { window.openedLinks.push(url); return {}; };
  const initialized = new Promise((resolve) => { bridge.oninitialized = resolve; });
  await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
  iframe.srcdoc = html;
  await initialized;
  await bridge.sendToolInput({ arguments: toolInput });
  await bridge.sendToolResult(toolResult);
  return bridge.getAppVersion();
};
"""


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_process_server(pg_uri, env={"SWITCHBOARD_MCP_APPS": "1"})
    yield srv
    srv.stop()


def test_the_committed_view_is_the_build_of_the_pinned_sdk():
    proc = subprocess.run([node(), str(BUILD), "--check"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_the_view_allows_no_network_source():
    html = apps.todo_view_html()
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    rules = dict(rule.split(" ", 1) for rule in csp.split("; "))
    assert rules["default-src"] == "'none'" and rules["connect-src"] == "'none'"
    assert rules["img-src"] == rules["frame-src"] == rules["form-action"] == rules["base-uri"] == "'none'"
    assert re.fullmatch(r"'sha256-[A-Za-z0-9+/]+=*'", rules["script-src"])
    assert "unsafe" not in csp and html.count("<script>") == 1


async def test_get_todo_links_the_view_and_the_view_is_a_resource(core, server):
    a = await vend(core, queues=["inbox"])
    narrow = await vend(core, agent="narrow", verbs=["claim_next"])
    async with sdk(server.url, a) as c:
        listed = {t.name: t for t in (await c.list_tools()).tools}
        assert listed["get_todo"].meta == {"ui": {"resourceUri": apps.TODO_VIEW_URI}}
        assert all(t.meta is None for name, t in listed.items() if name != "get_todo")
        found = {str(r.uri): r for r in (await c.list_resources()).resources}
        view = found[apps.TODO_VIEW_URI]
        assert view.mime_type == "text/html;profile=mcp-app" and view.meta == {"ui": {"csp": {}, "prefersBorder": True}}
        read = await c.read_resource(apps.TODO_VIEW_URI)
        assert read.contents[0].mime_type == "text/html;profile=mcp-app"
        assert read.contents[0].text == apps.todo_view_html()
        assert "MCP Apps" in c.instructions
    async with sdk(server.url, narrow) as c:  # no get_todo grant: no view
        assert apps.TODO_VIEW_URI not in {str(r.uri) for r in (await c.list_resources()).resources}
        with pytest.raises(Exception, match="resource not found"):
            await c.read_resource(apps.TODO_VIEW_URI)


def _apps_schema(name: str) -> jsonschema.protocols.Validator:
    """A definition of the MCP Apps SDK's own JSON Schema (ext-apps' generated schema.json)."""
    node()
    doc = json.loads((MODULES / "@modelcontextprotocol" / "ext-apps" / "dist" / "src" / "generated"
                      / "schema.json").read_text())
    key = "$defs" if "$defs" in doc else "definitions"
    return jsonschema.Draft202012Validator({**doc, "$ref": f"#/{key}/{name}"})


async def test_the_links_match_the_mcp_apps_schema(core, server):
    a = await vend(core, queues=["inbox"])
    async with sdk(server.url, a) as c:
        tool = {t.name: t for t in (await c.list_tools()).tools}["get_todo"]
        resource = {str(r.uri): r for r in (await c.list_resources()).resources}[apps.TODO_VIEW_URI]
    _apps_schema("McpUiToolMeta").validate(tool.meta["ui"])
    _apps_schema("McpUiResourceMeta").validate(resource.meta["ui"])
    with pytest.raises(jsonschema.ValidationError):  # the schema does check: a wrong type fails
        _apps_schema("McpUiToolMeta").validate({"resourceUri": 7})


async def test_off_by_default(core, live_server):
    srv = live_server()
    a = await vend(core)
    async with sdk(srv.url, a) as c:
        assert all(t.meta is None for t in (await c.list_tools()).tools)
        assert apps.TODO_VIEW_URI not in {str(r.uri) for r in (await c.list_resources()).resources}


async def test_inspector_app_info_probe(core, server):
    a = await vend(core, queues=["inbox"])
    info = await asyncio.to_thread(inspector, server.url, a, "--method", "tools/call", "--tool-name",
                                   "get_todo", "--app-info")
    assert info["resourceUri"] == apps.TODO_VIEW_URI, info


async def _history(core, a) -> dict:
    """A todo with a died attempt, a failed one whose summary is markup, and a completed one."""
    core.settings = core.settings.model_copy(update={"retry_backoff_base_seconds": 0,
                                                     "retry_backoff_max_seconds": 0})
    caller = endpoints.caller_from_row(await endpoints.resolve_credential(core, a.credential))
    t = await push(core, a, "Fix the flaky login test", max_attempts=5)
    await todos.claim(core, caller, t["id"], lease_ttl_seconds=1, claimant="box-1/worker")
    await todos.heartbeat(core, caller, t["id"], lease_ttl_seconds=1, note=f"note {MARKUP}")
    await asyncio.sleep(1.1)
    await sweeps.sweep_once(core)  # the reaper closes the lapsed attempt: died
    await todos.claim(core, caller, t["id"], claimant="box-2/worker")
    await todos.fail(core, caller, t["id"], summary=MARKUP, artifact="https://ci.example/run/7")
    await todos.claim(core, caller, t["id"], claimant="box-3/worker")
    await todos.complete(core, caller, t["id"], result={"pr": 42}, summary="pinned the clock",
                         artifact="mcp://cairn/abc123")
    return t


async def test_the_view_renders_a_real_get_todo_result_through_the_app_bridge(core, server, tmp_path):
    if chromium_path() is None:
        pytest.fail("Chromium is required (Debian's chromium; make test installs it)")
    node()
    host = tmp_path / "host.mjs"
    host.write_text(HOST)
    bundled = subprocess.run([str(MODULES / ".bin" / "esbuild"), str(host), "--bundle", "--format=iife",
                              f"--outfile={tmp_path / 'host.js'}", "--log-level=error"],
                             cwd=HERE, env={"NODE_PATH": str(MODULES), "PATH": "/usr/bin:/bin"},
                             capture_output=True, text=True, timeout=60)
    assert bundled.returncode == 0, bundled.stderr

    a = await vend(core, queues=["inbox"])
    t = await _history(core, a)
    async with sdk(server.url, a) as c:
        result = await c.call_tool("get_todo", {"id": t["id"]})
        html = (await c.read_resource(apps.TODO_VIEW_URI)).contents[0].text
    detail = body(result)
    wire = result.model_dump(by_alias=True, exclude_none=True, mode="json")

    from playwright.async_api import async_playwright

    requests, errors = [], []

    async def offline(route) -> None:
        requests.append(route.request.url)
        await route.abort()

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 760, "height": 900})
            await page.route("**/*", offline)
            page.on("pageerror", lambda e: errors.append(str(e)))
            await page.set_content("<!doctype html><html><head><title>host</title></head><body></body></html>")
            await page.add_script_tag(path=str(tmp_path / "host.js"))
            version = await page.evaluate("([h, i, r]) => window.mountApp(h, i, r)",
                                          [html, {"id": t["id"]}, wire])
            assert version["name"] == "switchboard-todo-detail"
            view = page.frames[1]
            await view.wait_for_selector(f'#root[data-rendered="{t["id"]}"]', timeout=10_000)

            assert await view.inner_text("h1") == "Fix the flaky login test"
            assert await view.inner_text(".fact-state") == "done"
            seqs = await view.eval_on_selector_all("li.attempt", "els => els.map(e => e.dataset.seq)")
            assert seqs == ["3", "2", "1"]
            died = view.locator("li.attempt.died")
            assert await died.count() == 1 and await died.get_attribute("data-seq") == "1"
            assert "died: no report" in await died.inner_text() and "last heartbeat" in await died.inner_text()
            # The markup summary is shown as its characters: no element made of it.
            assert await view.locator('li[data-seq="2"] p.summary').inner_text() == MARKUP
            # The died attempt's progress note, as its characters too.
            assert (await view.locator('li[data-seq="1"] li.note').inner_text()).endswith(f" · note {MARKUP}")
            assert await view.locator("img, b").count() == 0
            # https artifact: a link the host opens; anything else: text.
            link = view.locator('li[data-seq="2"] a.artifact')
            assert await link.get_attribute("href") == "https://ci.example/run/7"
            await link.click()
            await page.wait_for_function("() => window.openedLinks.length === 1")
            assert await page.evaluate("() => window.openedLinks") == ["https://ci.example/run/7"]
            assert await view.locator('li[data-seq="3"] span.artifact').inner_text() == "mcp://cairn/abc123"
            assert await view.locator("a").count() == 1
            assert json.loads(await view.inner_text("pre.result")) == {"pr": 42}
            # The view cannot reach the network: its CSP refuses fetch outright.
            refused = await view.evaluate(
                "() => fetch('https://example.org/').then(() => 'fetched', e => e.name)")
            assert refused == "TypeError"
        finally:
            await browser.close()
    assert detail["attempts_total"] == 3
    assert errors == [] and requests == [], (errors, requests)
