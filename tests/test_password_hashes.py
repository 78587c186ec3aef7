"""Passwords are hashed with one argon2 lane (core/humans.py); a password stored with the library's
default four lanes, as earlier versions stored it, still signs in."""

from __future__ import annotations

from argon2 import PasswordHasher

from core_world import sql
from switchboard.core import humans


async def test_new_hashes_use_one_lane_and_old_four_lane_hashes_still_verify(core):
    await humans.add(core, "lanes-new", "correct horse")
    stored = (await sql(core, "SELECT password_hash FROM humans WHERE name = 'lanes-new'"))[0]["password_hash"]
    assert ",p=1$" in stored
    await humans.add(core, "lanes-old", "placeholder")
    await sql(core, "UPDATE humans SET password_hash = %s WHERE name = 'lanes-old'",
              (PasswordHasher().hash("battery staple"),))
    assert await humans.verify_password(core, "lanes-old", "battery staple") is not None
    assert await humans.verify_password(core, "lanes-old", "wrong") is None
    assert await humans.verify_password(core, "lanes-new", "correct horse") is not None
