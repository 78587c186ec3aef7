"""The Board's team and admission routes over HTTP (issue 13): every new POST is refused with 403 without
the session's CSRF token before any core function is called; roles are enforced by the server whatever
the page offers (a member 403 on every manager's route, an admin 403 on owner-only ones); a non-member
gets the same 404, byte for byte, as for a team or endpoint that does not exist, and nothing changes."""

from __future__ import annotations

import uuid

import pytest

from board_kit import page_for
from switchboard.core import admission, producer, teams, todos
from switchboard.web.board import admission_pages, team_pages, todo_pages


def _slug() -> str:
    return f"h{uuid.uuid4().hex[:8]}"


async def _crew(server):
    slug = _slug()
    owner = await server.human("own")
    admin = await server.human("adm")
    member = await server.human("mem")
    await server.run(teams.create, owner, slug)
    await server.run(teams.add_member, owner, slug, admin.name, "admin")
    await server.run(teams.add_member, owner, slug, member.name, "member")
    label = f"team:{slug}/inbox"
    ep, _ = await server.endpoint(member, queues=[label], agent="worker")
    await server.run(teams.grant, owner, slug, label, ep["slug"])
    await server.run(producer.push_team, owner, label, title="Team work")
    return slug, owner, admin, member, ep


def _routes(slug: str, ep_slug: str, other: str) -> list[tuple[str, dict]]:
    """Every new POST route with a form that would change something."""
    label = f"team:{slug}/inbox"
    return [
        ("/teams", {"slug": _slug()}),
        (f"/teams/{slug}/members", {"name": other, "role": "member"}),
        (f"/teams/{slug}/members/role", {"name": other, "role": "admin"}),
        (f"/teams/{slug}/members/remove", {"name": other}),
        (f"/teams/{slug}/leave", {}),
        (f"/teams/{slug}/grants", {"queue": "inbox", "endpoint": ep_slug}),
        (f"/teams/{slug}/grants/remove", {"queue": label, "endpoint": ep_slug}),
        (f"/teams/{slug}/delete", {}),
        ("/admission/pause", {"queue": label, "endpoint": "", "paused": "1"}),
        ("/admission/policy", {"queue": label, "endpoint": "", "max_in_flight": "1"}),
        ("/admission/clear", {"queue": label, "endpoint": ""}),
        ("/todos/new", {"endpoint": f"team:{slug}", "queue": "inbox", "title": "sneaky"}),
    ]


def _state(server, slug: str) -> list:
    return [
        server.sql("SELECT h.name, m.role FROM team_members m JOIN teams t ON t.id = m.team_id "
                   "JOIN humans h ON h.id = m.human_id WHERE t.slug = %(s)s ORDER BY h.name", {"s": slug}),
        server.sql("SELECT g.queue, g.endpoint_id FROM team_grants g JOIN teams t ON t.id = g.team_id "
                   "WHERE t.slug = %(s)s ORDER BY 1, 2", {"s": slug}),
        server.sql("SELECT queue, paused, max_in_flight FROM admission_policies ORDER BY 1"),
        server.sql("SELECT count(*) FROM todos"),
        server.sql("SELECT count(*) FROM teams"),
    ]


async def _token(page) -> str:
    return await page.locator("form.sb-logout input[name=csrf_token]").get_attribute("value")


async def test_csrf_is_checked_before_any_core_call(board_server, browser, monkeypatch):
    slug, owner, admin, member, ep = await _crew(board_server)
    other = (await board_server.human("x")).name
    calls: list[str] = []

    def spy(name):
        async def refuse(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"{name} called without a CSRF token")
        return refuse

    before = _state(board_server, slug)
    async with page_for(browser, board_server, owner) as page:
        await page.goto(f"/teams/{slug}")
        token = await _token(page)
        for module, names in ((teams, ("create", "add_member", "set_role", "remove_member", "leave", "grant",
                                       "ungrant", "delete", "show", "list_for_human", "membership")),
                              (admission, ("set_paused", "set_policy", "clear", "window", "list_for_human")),
                              (producer, ("push_team", "push"))):
            for name in names:
                monkeypatch.setattr(module, name, spy(f"{module.__name__}.{name}"))
        for path, form in _routes(slug, ep["slug"], other):
            for sent in (form, {**form, "csrf_token": "forged-" + token[7:]}, {**form, "csrf_token": ""}):
                r = await page.request.post(path, form=sent, max_redirects=0)
                assert r.status == 403, (path, sent.get("csrf_token"))
                assert "invalid CSRF token" in await r.text()
        assert calls == []
        monkeypatch.undo()
        # The same requests with the token do reach the core (the owner may do all of these).
        r = await page.request.post(f"/teams/{slug}/members", form={"name": other, "role": "member",
                                                                     "csrf_token": token}, max_redirects=0)
        assert r.status == 303
    after = _state(board_server, slug)
    assert after[1:] == before[1:] and len(after[0]) == len(before[0]) + 1
    # The modules the routes use are the ones patched above (a route bound to a copied name would escape).
    assert team_pages.teams is teams and admission_pages.admission is admission and todo_pages.producer is producer


@pytest.mark.parametrize("role", ["member", "admin"])
async def test_roles_are_enforced_by_the_server(board_server, browser, role):
    slug, owner, admin, member, ep = await _crew(board_server)
    actor = member if role == "member" else admin
    other = (await board_server.human("x")).name
    label = f"team:{slug}/inbox"
    if role == "member":
        refused = [
            (f"/teams/{slug}/members", {"name": other, "role": "member"}),
            (f"/teams/{slug}/members/role", {"name": admin.name, "role": "member"}),
            (f"/teams/{slug}/members/remove", {"name": admin.name}),
            (f"/teams/{slug}/grants", {"queue": "inbox", "endpoint": ep["slug"]}),
            (f"/teams/{slug}/grants/remove", {"queue": label, "endpoint": ep["slug"]}),
            (f"/teams/{slug}/delete", {}),
            ("/admission/pause", {"queue": label, "endpoint": "", "paused": "1"}),
            ("/admission/policy", {"queue": label, "endpoint": "", "max_in_flight": "1"}),
            ("/admission/clear", {"queue": label, "endpoint": ""}),
        ]
    else:  # an admin manages members and grants, but not owners, and does not delete the team
        refused = [
            (f"/teams/{slug}/members", {"name": other, "role": "owner"}),
            (f"/teams/{slug}/members/role", {"name": owner.name, "role": "member"}),
            (f"/teams/{slug}/members/role", {"name": member.name, "role": "owner"}),
            (f"/teams/{slug}/members/remove", {"name": owner.name}),
            (f"/teams/{slug}/delete", {}),
        ]
    before = _state(board_server, slug)
    async with page_for(browser, board_server, actor) as page:
        await page.goto(f"/teams/{slug}")
        token = await _token(page)
        for path, form in refused:
            r = await page.request.post(path, form={**form, "csrf_token": token}, max_redirects=0)
            assert r.status == 403, path
            body = await r.text()
            assert "Not allowed" in body and "Nothing was changed" in body, path
        # The page offers the delete link to owners only; its confirmation says so to others.
        r = await page.request.get(f"/teams/{slug}/delete")
        assert r.status == 200 and "Only a team owner may delete the team" in await r.text()
    assert _state(board_server, slug) == before


async def test_a_non_member_is_told_not_found_like_an_unknown_team(board_server, browser):
    slug, owner, admin, member, ep = await _crew(board_server)
    stranger = await board_server.human("out")
    own_ep, _ = await board_server.endpoint(stranger, queues=["inbox"])
    unknown = _slug()
    before = _state(board_server, slug)
    async with page_for(browser, board_server, stranger) as page:
        await page.goto("/teams")
        token = await _token(page)
        for (path, form), (unknown_path, unknown_form) in zip(
                _routes(slug, ep["slug"], owner.name), _routes(unknown, ep["slug"], owner.name), strict=True):
            if path in ("/teams", "/todos/new"):
                continue  # creating a team is anyone's; the new-todo form answers 422 naming the field
            a = await page.request.post(path, form={**form, "csrf_token": token}, max_redirects=0)
            b = await page.request.post(unknown_path, form={**unknown_form, "csrf_token": token}, max_redirects=0)
            assert a.status == b.status == 404, path
            assert await a.body() == await b.body(), path
        # Another human's endpoint queue reads like an endpoint that does not exist.
        a = await page.request.post("/admission/pause", form={"queue": "worker", "endpoint": ep["slug"],
                                                              "paused": "1", "csrf_token": token})
        b = await page.request.post("/admission/pause", form={"queue": "worker", "endpoint": "nosuchslug",
                                                              "paused": "1", "csrf_token": token})
        assert a.status == b.status == 404 and await a.body() == await b.body()
        # Pushing to a foreign team's queue names no team either.
        r = await page.request.post("/todos/new", form={"endpoint": f"team:{slug}", "queue": "inbox",
                                                        "title": "sneaky", "csrf_token": token})
        assert r.status == 422 and "Choose one of your endpoints or teams." in await r.text()
        # Their own endpoint queue they may pause.
        r = await page.request.post("/admission/pause", form={"queue": "inbox", "endpoint": own_ep["slug"],
                                                              "paused": "1", "csrf_token": token},
                                    max_redirects=0)
        assert r.status == 303 and r.headers["location"] == "/queues?done=paused#sb-queues"
    after = _state(board_server, slug)
    assert after[0:2] == before[0:2] and after[3:] == before[3:]
    assert [p for p in after[2] if p not in before[2]] == [("inbox", True, None)]


async def test_an_owner_claim_on_a_paused_queue_is_409_saying_why(board_server, browser):
    """A Board claim is charged like any claim (SPEC-0030): on a paused team queue it is deferred, a
    409 drawer that says so, and nothing changes."""
    slug, owner, admin, member, ep = await _crew(board_server)
    label = f"team:{slug}/inbox"
    await board_server.run(admission.set_paused, owner, label, True)
    todo_id = board_server.sql("SELECT t.id FROM todos t JOIN teams tm ON tm.id = t.team_id "
                               "WHERE tm.slug = %(s)s", {"s": slug})[0][0]
    async with page_for(browser, board_server, member) as page:
        await page.goto(f"/todos/{todo_id}")
        token = await _token(page)
        r = await page.request.post(f"/todos/{todo_id}/claim", form={"csrf_token": token}, max_redirects=0)
        assert r.status == 409
        assert "paused" in await r.text()
    row = board_server.sql("SELECT state, attempts_total FROM todos WHERE id = %(i)s", {"i": todo_id})[0]
    assert tuple(row) == ("pending", 0)


async def test_a_todo_on_a_held_back_queue_shows_a_chip(board_server, browser):
    """SPEC-0030: the todo list marks a pending todo whose queue admission control holds back now,
    and the mark goes with the hold."""
    slug, owner, admin, member, ep = await _crew(board_server)
    label = f"team:{slug}/inbox"
    async with page_for(browser, board_server, member) as page:
        await page.goto(f"/todos?team={slug}")
        assert await page.locator("[data-sb-held]").count() == 0
        await board_server.run(admission.set_paused, owner, label, True)
        await page.goto(f"/todos?team={slug}")
        chip = page.locator("[data-sb-held]")
        assert await chip.count() == 1 and (await chip.inner_text()).strip() == "held back"
        listed = await board_server.run(todos.list_for_human, member, team=slug)
        assert [t["held_back"] for t in listed] == [True]
        await board_server.run(admission.set_paused, owner, label, False)
        await page.goto(f"/todos?team={slug}")
        assert await page.locator("[data-sb-held]").count() == 0
