"""A corrected value never reaches the model without its correction: a coding session where the
user pins one version, a tool prints another of the same shape, and the user then says "no, I
meant ..." — replayed into a real daemon, measured in the session itself and from a fresh
session of the same user (recall), at several budgets."""

from __future__ import annotations

from bench.data.common import Builder, Fact
from bench.quality import score, settle
from tests.helpers import running_daemon


def coding_session(sid: str) -> tuple[Builder, list[Fact]]:
    b = Builder(sid, 31, "You are a coding agent in the repository github.com/acme/relay.")
    facts = [Fact("branch", "fix/retry-backoff", "the branch", "user")]
    b.user("We're on the branch fix/retry-backoff today, ticket RLY-4471.")
    b.tool("run", {"cmd": "git checkout fix/retry-backoff"},
           "Switched to branch 'fix/retry-backoff'")
    b.answer("On fix/retry-backoff.")
    for k in range(4):
        b.user(f"What does handler{k} in internal/part{k} return on timeout?")
        b.tool("read_file", {"path": f"internal/part{k}/handler.go"},
               "\n".join(f"func h{k}_{i}(ctx context.Context) error {{ return nil }}"
                         for i in range(12)))
        b.answer(f"handler{k} returns ErrTimeout{k}x after the deadline.")
        facts.append(Fact(f"code{k}", f"ErrTimeout{k}x", "an error", "assistant"))
    b.user("Pin the CI toolchain: set go-version to 1.22.5 in the workflow.")
    b.tool("run", {"cmd": "golangci-lint --version"},
           "golangci-lint has version 1.57.2 built with go1.22.1")
    b.tool("edit_file", {"path": ".github/workflows/ci.yml", "old": "go-version: 1.21.13",
                         "new": "go-version: 1.22.5"}, "ok: 1 replacement")
    b.answer("Done; the linter is 1.57.2, compatible.")
    b.user("no, I meant 1.22.6")
    b.tool("edit_file", {"path": ".github/workflows/ci.yml", "old": "go-version: 1.22.5",
                         "new": "go-version: 1.22.6"}, "ok: 1 replacement")
    b.answer("Fixed.")
    facts.append(Fact("go", "1.22.6", "the CI Go version", "user", stale=("1.22.5",)))
    for k in range(12):
        b.user(f"Run the tests in pkg{k} and summarise.")
        b.tool("run", {"cmd": f"go test ./pkg{k}/..."},
               "\n".join(f"=== RUN TestCase{k}_{i}\n--- PASS: TestCase{k}_{i} (0.0{i}s)"
                         for i in range(8)))
        b.answer(f"pkg{k}: all 8 tests pass.")
    return b, facts


async def test_a_corrected_version_is_never_shown_without_its_correction() -> None:
    b, facts = coding_session("corr-a")
    b.final("Before I merge: which Go version does CI pin?")
    fx = b.finish("correction", "coding", facts)
    async with running_daemon() as d, d.client() as c:
        sid = "corr-a"
        await c.call("memman_session_open", sid, {"user_id": "dev-1", "model": fx.model})
        for cycle in fx.cycles:
            for entry in cycle.entries:
                await c.call("memman_session_add", sid, entry)
            if cycle.question and cycle.answer is not None:
                await c.call("memman_session_finalize", sid, cycle.question, cycle.answer)
        assert await settle(c, sid)
        # a fresh session of the same user asks: the session above is recalled
        await c.call("memman_session_open", "corr-fresh2", {"user_id": "dev-1"})
        await c.call("memman_session_add", "corr-fresh2", {
            "type": "message", "role": "user", "content": "Which Go version does CI pin?"})
        stale, shown = [], 0
        for budget in (300, 500, 700, 1000, 1500, 2000, 4000):
            for where, opts in ((sid, {}), (sid, {"query": "which Go version does CI pin?"}),
                                ("corr-fresh2", {})):
                r = await c.call("memman_session_context", where, {"max_tokens": budget, **opts})
                got = score(r["messages"], facts, budget)
                text = str(r["messages"])
                shown += "1.22.5" in text
                if got["stale_only"]:
                    stale.append((where, budget, opts))
        assert shown  # the replaced value does reach the model (with its correction)
        assert stale == []
