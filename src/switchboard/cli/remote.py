"""The CLI's way to a remote server: the human API (`/api/v1`, docs/api.md) over HTTP, as the human
whose API token is sent.

Where the server and token come from, first found wins:

- `SWITCHBOARD_URL` (the server's base URL) with `SWITCHBOARD_TOKEN` (an `sbh_…` token; without it,
  the token saved by `switchboard login` for that same URL);
- the file `switchboard login URL` saved: `remote.json` in the user config directory
  (platformdirs' `user_config_dir("switchboard")`), mode 0600, removed by `switchboard logout`.

Neither: the CLI works on this machine's database (`common.run`). Every refusal of the server becomes
the CLI's own error (`common.fail`): the same code, message and argument, exit 1; a server that
cannot be reached, or answers something that is not the API, is one line and exit 1 as well.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote, urlsplit

import httpx
import platformdirs

from .common import EXIT_REFUSED, fail, fail_usage

URL_ENV, TOKEN_ENV = "SWITCHBOARD_URL", "SWITCHBOARD_TOKEN"
RELAY_TOKEN_ENV = "SWITCHBOARD_API_TOKEN"  # the relay's name for the same human token (docs/relay.md)
LOGIN_FILE = "remote.json"
TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class Server:
    url: str    # the base URL, without a trailing slash
    token: str
    origin: str  # where it came from: "environment" or the login file's path


def login_path() -> Path:
    return Path(platformdirs.user_config_dir("switchboard")) / LOGIN_FILE


def base_url(value: str) -> str:
    """A server's base URL as given (`https://sb.example.com`, `http://127.0.0.1:8080/`), checked."""
    url = value.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        fail_usage(f"not a server URL: {value!r} (expected http(s)://host[:port])", argument="url")
    return url


def read_login() -> dict | None:
    path = login_path()
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        fail_usage(f"cannot read the saved login {path}: {exc}; run `switchboard logout`")
    if not isinstance(saved, dict) or not isinstance(saved.get("url"), str) or not isinstance(saved.get("token"), str):
        fail_usage(f"the saved login {path} is not one this version wrote; run `switchboard logout`")
    return saved


def write_login(url: str, token: str) -> Path:
    """Save the server and token, readable by this user only (0600 from the moment it exists)."""
    path = login_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({"url": url, "token": token}, fh)
        fh.write("\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path


def remove_login() -> bool:
    try:
        login_path().unlink()
    except FileNotFoundError:
        return False
    return True


def configured() -> Server | None:
    """The remote server the CLI speaks to, or None for this machine's database."""
    env_url = os.environ.get(URL_ENV, "").strip()
    if env_url:
        # The relay takes an endpoint's MCP URL in the same variable: its server is the part before /mcp/.
        url = base_url(env_url.split("/mcp/", 1)[0])
        token = os.environ.get(TOKEN_ENV, "").strip() or os.environ.get(RELAY_TOKEN_ENV, "").strip()
        if token:
            return Server(url, token, "environment")
        saved = read_login()
        if saved and base_url(saved["url"]) == url:
            return Server(url, saved["token"], str(login_path()))
        fail_usage(f"{URL_ENV} is set but {TOKEN_ENV} is not: set it to an API token (sbh_…), "
                   f"or run `switchboard login {url}`", argument="token")
    saved = read_login()
    if saved:
        return Server(base_url(saved["url"]), saved["token"], str(login_path()))
    return None


def seg(value: Any) -> str:
    """One path segment: whatever was typed, percent-encoded (a slash stays inside the segment)."""
    return quote(str(value), safe="")


class Client:
    """The human API over HTTP. Each call answers the decoded JSON object, or fails the command the
    way a local refusal does."""

    def __init__(self, server: Server) -> None:
        self.server = server

    def call(self, method: str, path: str, *, body: dict | None = None, params: dict | None = None) -> Any:
        url = self.server.url + "/api/v1" + path
        query = {k: ("true" if v is True else "false" if v is False else str(v))
                 for k, v in (params or {}).items() if v is not None}
        headers = {"Authorization": f"Bearer {self.server.token}", "Accept": "application/json"}
        try:
            with httpx.Client(timeout=TIMEOUT_SECONDS, follow_redirects=False, trust_env=True) as http:
                response = http.request(method, url, json=body, params=query, headers=headers)
        except httpx.TimeoutException:
            unreachable(self.server.url, "no answer in time")
        except httpx.HTTPError as exc:
            unreachable(self.server.url, " ".join(str(exc).split()) or type(exc).__name__)
        return answer(self.server.url, response)

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params=params)

    def post(self, path: str, body: dict | None = None) -> Any:
        return self.call("POST", path, body={} if body is None else body)

    def put(self, path: str, body: dict) -> Any:
        return self.call("PUT", path, body=body)

    def delete(self, path: str, body: dict | None = None) -> Any:
        return self.call("DELETE", path, body=body)


def unreachable(url: str, why: str) -> NoReturn:
    fail("unavailable", f"cannot reach the server at {url}: {why}", EXIT_REFUSED)


def answer(url: str, response: httpx.Response) -> Any:
    try:
        data = response.json()
    except ValueError:
        data = None
    if 200 <= response.status_code < 300 and isinstance(data, dict):
        return data
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        code, message = error["code"], str(error.get("message") or error["code"])
        if code == "rate_limited" and response.headers.get("Retry-After"):
            message += f" (retry after {response.headers['Retry-After']} s)"
        argument = error.get("argument") if isinstance(error.get("argument"), str) else None
        fail(code, message, EXIT_REFUSED, argument=argument, line=f"{code}: {message}")
    unreachable(url, f"HTTP {response.status_code} that is not the Switchboard API "
                     f"(is {url} a Switchboard server?)")
