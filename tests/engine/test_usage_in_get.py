"""The usage ledger's drift is part of the session's state (memman_session_get)."""

from tests.helpers import running_daemon


async def test_session_get_shows_billed_against_counted() -> None:
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s")
        await c.session_add("s", {"role": "user", "content": "hello there"})
        ctx = await c.session_context("s")
        await c.session_report_usage("s", ctx["tokens"] + 4, 10)
        u = (await c.session_get("s"))["usage"]
        assert u["reports"] == 1 and u["last_drift"] == 4 and u["completion_tokens"] == 10
