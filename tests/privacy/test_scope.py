"""Who sees what, attacked from outside: the real daemon on a real socket (and ``memman mcp``
driven by the MCP SDK's own client in ``test_mcp_scope.py``). Each test is one attack: another
user, another tenant, private, recall off, excluded, forgotten; it asserts the refusal (naming
its parameter) or the absence of the foreign bytes."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memman.errors import CONFLICT, INVALID_PARAMS, MemmanError
from tests.helpers import running_daemon, short_tmpdir

DAY = 86400.0
T0 = 1717200000.0  # 2024-06-01


def body(ctx: dict) -> str:
    return "\n".join(m.get("content") or "" for m in ctx["messages"])


async def say(c, sid: str, user: str, tenant: str, lines: list[str], at: float = T0,
              **open_opts) -> list[int]:
    await c.session_open(sid, {"user_id": user, "tenant_id": tenant, **open_opts})
    ids = []
    for k, text in enumerate(lines):
        out = await c.session_add(sid, {"role": "user", "content": text, "created_at": at + k})
        ids.append(out["id"])
    return ids


async def search(c, user: str, query: str, tenant: str | None = None) -> str:
    opts = {"limit": 50} if tenant is None else {"limit": 50, "tenant_id": tenant}
    got = await c.memory_search(user, "session", query, opts)
    return "\n".join(r["text"] for r in got["results"])


async def test_search_never_crosses_users_or_tenants_whatever_the_recall_scope() -> None:
    for scope in ("user", "tenant"):
        async with running_daemon(recall={"scope": scope}) as d, d.client() as c:
            await say(c, "ana-acme", "ana", "acme", ["The vault code word is marigold."])
            await say(c, "bob-acme", "bob", "acme", ["My locker code word is tangerine."])
            await say(c, "tina-acme", "tina", "acme", ["The acme launch code word is heliotrope."])
            await say(c, "tina-globex", "tina", "globex", ["The globex code word is juniper."])
            assert await d.app.recall.drained(60)
            q = "what is the code word"
            assert "marigold" not in await search(c, "bob", q, "acme")
            assert "tangerine" in await search(c, "bob", q, "acme")
            # a user id that has no session at all sees nothing
            assert await search(c, "mallory", q, "acme") == ""
            # the same user id in two tenants: each tenant its own
            acme = await search(c, "tina", q, "acme")
            globex = await search(c, "tina", q, "globex")
            assert "heliotrope" in acme and "juniper" not in acme
            assert "juniper" in globex and "heliotrope" not in globex
            # no tenant named: the user's one tenant; a user id in two tenants must name one
            assert "tangerine" in await search(c, "bob", q)
            assert "marigold" not in await search(c, "bob", q)
            assert await search(c, "mallory", q) == ""
            with pytest.raises(MemmanError) as exc:
                await search(c, "tina", q)
            assert exc.value.code == INVALID_PARAMS and "opts.tenant_id" in exc.value.message
            # the window of a new session agrees
            await say(c, "tina-q", "tina", "globex", ["Remind me of the code word?"])
            ctx = body(await c.session_context("tina-q", {"max_tokens": 2000}))
            assert "juniper" in ctx and "heliotrope" not in ctx


async def test_recall_off_sessions_are_not_searched_across_and_stay_off_after_a_clear() -> None:
    async with running_daemon() as d, d.client() as c:
        await say(c, "hidden", "ana", "default", ["The hidden lake is called Lac Bleu."],
                  recall=False)
        await say(c, "open", "ana", "default", ["The open lake is called Lac Vert."])
        assert await d.app.recall.drained(60)
        got = await search(c, "ana", "which lake is called Lac")
        assert "Lac Vert" in got and "Lac Bleu" not in got
        # asked about that session by name, its owner reads it
        own = await c.memory_search("ana", "session", "lake Lac", {"session_id": "hidden"})
        assert any("Lac Bleu" in r["text"] for r in own["results"])
        # another user naming it gets nothing
        other = await c.memory_search("bob", "session", "lake Lac", {"session_id": "hidden"})
        assert other["results"] == []
        await c.session_clear("hidden")
        # a clear keeps who may see the session: its opt-out, its agent and project
        await c.session_open("proj", {"user_id": "ana", "agent": "codex", "project": "/p/one",
                                      "recall_project": True})
        await c.session_clear("proj")
        kept = await c.session_get("proj", {"entries": False})
        assert (kept["agent"], kept["project"]) == ("codex", "/p/one")
        await c.session_add("hidden", {"role": "user", "content": "Lac Bleu has a red boat."})
        assert await d.app.recall.drained(60)
        assert "red boat" not in await search(c, "ana", "Lac Bleu boat")


@pytest.mark.parametrize("value", [1, 0, "true", "yes", None, [True]])
async def test_private_is_a_boolean_only_in_add_and_import(value) -> None:
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s", {"user_id": "ana"})
        with pytest.raises(MemmanError) as exc:
            await c.session_add("s", {"role": "user", "content": "x", "metadata": {"private": value}})
        assert exc.value.code == INVALID_PARAMS and "metadata.private" in exc.value.message
        await c.session_add("s", {"role": "user", "content": "ok", "metadata": {"private": True}})
        data = await c.session_export("s")
        data["entries"][0]["metadata"]["private"] = value
        with pytest.raises(MemmanError) as exc:
            await c.session_import(data, {"session_id": "s2"})
        assert exc.value.code == INVALID_PARAMS and "metadata.private" in exc.value.message
        assert (await c.session_get("s", {}))["entries"][0]["content"] == "ok"


async def test_a_private_correction_does_not_leak_and_the_old_value_is_not_shown_alone() -> None:
    async with running_daemon() as d, d.client() as c:
        # within one session, and across two
        await say(c, "a1", "ana", "default", ["deploy_port: 8080", "lunch was nice today"])
        await c.session_add("a1", {"role": "user", "content": "deploy_port: 9191",
                                   "created_at": T0 + 50, "metadata": {"private": True}})
        await say(c, "b1", "ana", "default", ["build_host: alpha-7"], at=T0 + DAY)
        await say(c, "b2", "ana", "default", ["build_host: omega-3"], at=T0 + 2 * DAY)
        await c.session_open("b2", {"user_id": "ana", "recall": False})
        await say(c, "q", "ana", "default", ["What is the deploy_port and the build_host?"],
                  at=T0 + 3 * DAY)
        assert await d.app.recall.drained(60)
        for budget in (300, 1000, 4000):
            got = body(await c.session_context("q", {"max_tokens": budget}))
            assert "9191" not in got and "omega-3" not in got
            assert "8080" not in got, "the value a hidden correction replaced came alone"
            assert "alpha-7" not in got, "the value a recall-off session replaced came alone"
        # its own session reads the private correction
        assert "9191" in body(await c.session_context("a1", {"max_tokens": 4000,
                                                             "query": "deploy_port"}))


async def test_an_exclusion_outlives_clear_import_and_restart() -> None:
    root = short_tmpdir()
    async with running_daemon(root) as d, d.client() as c:
        [e] = await say(c, "s1", "ana", "default", ["The spare key is under the green pot."])
        await say(c, "s2", "ana", "default", ["Where is the spare key?"])
        assert await d.app.recall.drained(60)
        assert "green pot" in body(await c.session_context("s2", {"max_tokens": 2000}))
        await c.recall_exclude("s2", e, True)
        await c.session_clear("s2")
        await c.session_add("s2", {"role": "user", "content": "Where is the spare key again?"})
        assert "green pot" not in body(await c.session_context("s2", {"max_tokens": 2000}))
        data = await c.session_export("s2")
        await c.session_import(data, {"session_id": "s2", "replace": True})
        assert "green pot" not in body(await c.session_context("s2", {"max_tokens": 2000}))
    async with running_daemon(root) as d, d.client() as c:
        assert "green pot" not in body(await c.session_context("s2", {"max_tokens": 2000}))


async def test_import_replace_over_another_owner_is_refused_unless_reassigned() -> None:
    async with running_daemon() as d, d.client() as c:
        await say(c, "ana-s", "ana", "acme", ["ana's notes: the pass phrase is bluebird."])
        await say(c, "bob-s", "bob", "acme", ["bob's notes: buy milk."])
        ana = await c.session_export("ana-s")
        with pytest.raises(MemmanError) as exc:
            await c.session_import(ana, {"session_id": "bob-s", "replace": True})
        assert exc.value.code == CONFLICT
        assert exc.value.data["owner"] == {"user_id": "bob", "tenant_id": "acme"}
        kept = await c.session_get("bob-s", {})
        assert kept["user_id"] == "bob" and "buy milk" in kept["entries"][0]["content"]
        # another tenant is another owner too
        ana["meta"]["user_id"], ana["meta"]["tenant_id"] = "bob", "globex"
        with pytest.raises(MemmanError) as exc:
            await c.session_import(ana, {"session_id": "bob-s", "replace": True})
        assert exc.value.code == CONFLICT
        moved = await c.session_import(ana, {"session_id": "bob-s", "replace": True,
                                             "reassign": True})
        assert moved["session"]["tenant_id"] == "globex"
        audit = await c.audit_list({"session_id": "bob-s"})
        assert any(r["action"] == "reassign" for r in audit["records"])


async def test_forget_names_what_it_removes_and_refuses_an_ambiguous_number() -> None:
    async with running_daemon() as d, d.client() as c:
        await c.session_open("cleo-s", {"user_id": "cleo"})
        entries: dict[int, str] = {}
        prefs: dict[int, str] = {}
        for k in range(60):  # both kinds of ids count up from small numbers: make them meet
            e = await c.session_add("cleo-s", {"role": "user", "content": f"note number {k}"})
            entries[e["id"]] = f"note number {k}"
            p = await c.memory_learn("cleo", f"pref{k}", f"value {k}")
            prefs[p["record"]["id"]] = f"value {k}"
            if set(entries) & set(prefs):
                break
        both = sorted(set(entries) & set(prefs))
        assert both, "no id named both a record and an entry"
        n = both[0]
        with pytest.raises(MemmanError) as exc:
            await c.memory_forget("cleo", n)
        assert exc.value.code == INVALID_PARAMS and "record_id" in exc.value.message
        for bad in ("entry:", "memory:x", "thing:3", "memory:cleo-s#3", "entry:#4"):
            with pytest.raises(MemmanError) as exc:
                await c.memory_forget("cleo", bad)
            assert exc.value.code == INVALID_PARAMS and "record_id" in exc.value.message
        # both still there
        assert n in {e["id"] for e in (await c.session_get("cleo-s", {}))["entries"]}
        out = await c.memory_forget("cleo", f"entry:cleo-s#{n}")
        assert out["kind"] == "session_entry"
        assert n not in {e["id"] for e in (await c.session_get("cleo-s", {}))["entries"]}
        gone = await c.memory_forget("cleo", f"memory:{n}")
        assert gone["forgotten"]["id"] == n
        # another user can forget neither kind
        e2 = await c.session_add("cleo-s", {"role": "user", "content": "keep me"})
        for ref in (e2["id"], f"entry:{e2['id']}", f"entry:cleo-s#{e2['id']}"):
            with pytest.raises(MemmanError):
                await c.memory_forget("bob", ref)
        # nor the same user id in another tenant
        with pytest.raises(MemmanError):
            await c.memory_forget("cleo", f"entry:{e2['id']}", {"tenant_id": "globex"})
        assert "keep me" in [e["content"] for e in (await c.session_get("cleo-s", {}))["entries"]]


# --- the property: no read path ever holds an entry the caller may not see ------------------
USERS = ["ana", "bob"]
TENANTS = ["acme", "globex"]
op = st.tuples(st.sampled_from(USERS), st.sampled_from(TENANTS), st.integers(0, 2),
               st.booleans(), st.booleans())


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=st.lists(op, min_size=3, max_size=10), scope=st.sampled_from(["user", "tenant"]))
def test_no_read_path_returns_what_the_caller_may_not_see(ops, scope) -> None:
    import asyncio
    asyncio.run(_property(ops, scope))


async def _property(ops, scope: str) -> None:
    async with running_daemon(recall={"scope": scope}) as d, d.client() as c:
        visible_to: dict[str, tuple[str, str, bool]] = {}  #: token -> (user, tenant, shown across)
        off: set[str] = set()
        for k, (user, tenant, n, private, recall_off) in enumerate(ops):
            sid = f"{user}-{tenant}-{n}"
            if sid not in off and recall_off:
                off.add(sid)
            await c.session_open(sid, {"user_id": user, "tenant_id": tenant,
                                       "recall": sid not in off})
            token = f"zq{k}marker"
            await c.session_add(sid, {"role": "user", "content": f"the secret is {token}",
                                      "metadata": {"private": private}})
            visible_to[token] = (user, tenant, not private and sid not in off)
        assert await d.app.recall.drained(60)
        for user in USERS + ["mallory"]:
            for tenant in TENANTS:
                got = await search(c, user, "what is the secret marker", tenant)
                await c.session_open(f"q-{user}-{tenant}", {"user_id": user, "tenant_id": tenant})
                await c.session_add(f"q-{user}-{tenant}",
                                    {"role": "user", "content": "what is the secret marker?"})
                ctx = body(await c.session_context(f"q-{user}-{tenant}", {"max_tokens": 4000}))
                for token, (owner, otenant, across) in visible_to.items():
                    may = across and owner == user and otenant == tenant
                    if not may:
                        assert token not in got, (token, user, tenant)
                        assert token not in ctx, (token, user, tenant)
