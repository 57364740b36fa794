"""A session exports identically before and after a daemon restart (last activity included)."""

from tests.helpers import running_daemon, short_tmpdir


async def test_export_is_identical_across_a_restart() -> None:
    root = short_tmpdir()
    async with running_daemon(root) as d, d.client() as c:
        await c.session_open("s", {"user_id": "ana"})
        await c.session_add("s", {"role": "user", "content": "What changed in the plan?"})
        await c.session_finalize("s", "What changed in the plan?", "The plan moved a week. " * 60)
        await c.session_add("s", {"role": "user", "content": "And the budget?"})
        # finalize logging the question and answer itself, then a pin and usage report
        await c.session_finalize("s", "And the team?", "Two people joined.")
        await c.session_pin("s", 1, True)
        await c.session_report_usage("s", 120, 30)
        await c.session_finalize("s", "Anything else?", "No.")
        before = await c.session_export("s")
    async with running_daemon(root) as d, d.client() as c:
        after = await c.session_export("s")
    assert after == before
