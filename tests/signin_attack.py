"""A crowd of wrong sign-ins against a running server, as its own process (tests/test_signin_throttle.py).

    python tests/signin_attack.py URL FIRST_ADDRESS ADDRESSES PER_ADDRESS

From each of ADDRESSES loopback addresses (FIRST_ADDRESS, then the next ones in its last byte) one
client fetches the sign-in form, then sends PER_ADDRESS wrong sign-ins for made-up accounts at once.
Prints the answers' status codes as one JSON list. The attack runs in a process of its own so that
its clients' work does not queue behind, or ahead of, the latency probes of the test that measures
the server.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import sys
import uuid

import httpx


async def attack_from(base: str, address: str, per_address: int) -> list[int]:
    transport = httpx.AsyncHTTPTransport(local_address=address)
    async with httpx.AsyncClient(base_url=base, transport=transport, timeout=120) as client:
        page = await client.get("/login")
        match = re.search(r'name="login_token" value="([^"]+)"', page.text)
        assert match, page.status_code
        token = match.group(1)
        client.cookies.set("sb_login", token)

        async def guess() -> int:
            r = await client.post("/login", data={"name": f"guess-{uuid.uuid4().hex[:10]}",
                                                  "password": "wrong-password", "login_token": token})
            return r.status_code

        return list(await asyncio.gather(*(guess() for _ in range(per_address))))


async def main(base: str, first: str, addresses: int, per_address: int) -> list[int]:
    start = ipaddress.IPv4Address(first)
    groups = await asyncio.gather(*(attack_from(base, str(start + i), per_address) for i in range(addresses)))
    return [status for group in groups for status in group]


if __name__ == "__main__":
    url, first_address, count, per = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(asyncio.run(main(url, first_address, count, per))))
