"""Unit tests of the pieces without a screen: live coalescing, rows, gauge bands, backend."""

from __future__ import annotations

from memman import names
from memman.errors import METHOD_NOT_FOUND, MemmanError
from memman.reconnect import Subscriptions
from memman_tui.backend import UNAVAILABLE, Backend
from memman_tui.live import LiveState
from memman_tui.rows import overview_matches
from memman_tui.widgets.gauge import band, gauge_text


def ev(sid: str, seq: int, kind: str = "entry_added", tokens: int = 10) -> dict:
    return {"kind": kind, "seq": seq, "subscription": 1, "session_id": sid,
            "session": {"session_id": sid, "active_tokens": tokens, "max_tokens": 100}}


def test_a_flood_on_one_session_is_one_row_update():
    live = LiveState()
    for seq in range(1, 1001):
        live.on_event(names.SESSION_EVENT, ev("s1", seq, tokens=seq))
    changes = live.drain()
    assert changes.sessions == {"s1"} and changes.events == 1000 and not changes.resync
    assert live.sessions["s1"]["active_tokens"] == 1000  # the newest state wins
    assert len(changes.lines) <= 200  # the log gets a bounded batch
    assert live.drain().empty


def test_a_sequence_gap_asks_for_a_resync():
    """The client library checks ``seq`` (the one check); its gap reaches the live state."""
    live = LiveState()
    subs = Subscriptions(on_gap=lambda _gap: live.missed())
    subs.add(1, [], {}, None)
    for seq in (1, 5):
        payload = ev("s1", seq)
        subs.event(payload, names.SESSION_EVENT)
        live.on_event(names.SESSION_EVENT, payload)
    assert live.drain().resync


def test_backpressure_drops_detail_and_resyncs_once():
    live = LiveState(max_pending=10)
    for seq in range(1, 100):
        live.on_event(names.SESSION_EVENT, ev(f"s{seq}", seq))
    changes = live.drain()
    assert changes.resync and live.dropped == 89
    assert len(changes.sessions) == 10


def test_deleted_and_tier_counts():
    live = LiveState()
    live.load_sessions([{"session_id": "s1"}])
    live.load_counts("s1", {"a"}, {1})
    live.on_event(names.CACHE_EVENT, {"kind": "put", "seq": 1, "session_id": "s1",
                                      "entry": {"key": "b"}})
    live.on_event(names.SCRATCHPAD_EVENT, {"kind": "evicted", "seq": 2, "session_id": "s1",
                                           "snippet_id": 1})
    assert live.counts("s1") == (2, 0)
    live.on_event(names.SESSION_EVENT, {"kind": "deleted", "seq": 3, "session_id": "s1"})
    changes = live.drain()
    assert changes.removed == {"s1"} and "s1" not in live.sessions


def test_stats_ticks_do_not_fill_the_log():
    live = LiveState()
    live.on_event(names.STATS_EVENT, {"kind": "tick", "seq": 1, "requests_per_s": 5})
    assert not live.log and live.stats_event["requests_per_s"] == 5


def test_gauge_bands_always_show_the_number():
    assert [band(u, 100)[0] for u in (10, 60, 80, 90, 100, 150)] == [
        "ok", "warn", "prune", "aggressive", "emergency", "emergency"]
    text = gauge_text(85, 100, 10).plain
    assert "85/100" in text and "85%" in text and "prune" in text


def test_overview_filter_matches_id_user_tenant():
    ov = {"session_id": "demo-01", "user_id": "alice", "tenant_id": "acme"}
    assert overview_matches(ov, "ALI") and overview_matches(ov, "acme")
    assert not overview_matches(ov, "bob")


class _Missing:
    async def call(self, method, *params):
        raise MemmanError(METHOD_NOT_FOUND, f"unknown method '{method}'")


async def test_unknown_methods_degrade_to_unavailable():
    backend = Backend(_Missing(), {})
    assert await backend.cache_list("s1") is UNAVAILABLE
    assert not backend.has(names.CACHE_LIST)
    listed = Backend(_Missing(), {"methods": [{"name": names.STATS}]})
    assert await listed.scratchpad_candidates("s1") is UNAVAILABLE  # not even asked


def test_an_answer_without_parts_gets_kinds_from_its_messages():
    """The guarded fallback for a daemon whose context answer has no `parts`."""
    from memman_tui.sent import read_answer

    answer = {"session_id": "s1", "budget": 1000, "tokens": 120, "history_tokens": 300,
              "cached_tools": {"messages": 2, "tokens": 30},
              "messages": [
                  {"role": "system", "content": "[SYSTEM: be careful]"},
                  {"role": "system", "content": "[Conversation summary]\nQ: a A: b"},
                  {"role": "assistant", "content": "[Summary of 4 earlier messages: x]"},
                  {"role": "assistant", "content": "[3 messages omitted]"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "c1", "function": {"name": "db", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "rows"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "c2", "function": {"name": "weather", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": "c2", "content": "rain"},
                  {"role": "user", "content": "and now?"}]}
    view = read_answer(answer)
    assert view.fallback
    assert [p.kind for p in view.parts] == [
        "system_prompt", "rolling_summary", "gap_summary", "omission_marker", "tool_call",
        "tool_result", "cached_tool_result", "cached_tool_result", "message"]
    assert view.sent_tokens == 120 and view.history_tokens == 300
    assert view.sent_usage == 0.12 and view.history_usage == 0.3
    assert view.breakdown["free"] == 880
    with_parts = read_answer({**answer, "parts": [
        {"kind": "message", "tokens": 5, "entry_ids": [i], "summary_id": None, "score": None,
         "mark": "kept"} for i in range(9)]})
    assert not with_parts.fallback and [p.entry_ids for p in with_parts.parts][0] == [0]


def test_threshold_crossings_alert_once_until_sent_falls_back():
    live = LiveState()

    def point(i: int, share: float) -> None:
        live.on_event(names.SESSION_EVENT, {
            "kind": "series_point", "session_id": "s1", "point": {
                "id": i, "sent_usage": share, "sent_tokens": int(share * 1000), "budget": 1000}})

    for i, share in enumerate((0.5, 0.92, 0.88, 0.93, 0.86, 0.95)):  # hovering at 90 %
        point(i, share)
    alerts = live.drain().alerts
    assert len(alerts) == 1 and "crossed 90 %" in alerts[0][1]
    point(10, 0.7)  # well below: armed again
    point(11, 0.91)
    point(12, 1.02)
    alerts = live.drain().alerts
    assert [a[1].split("crossed ")[1][:5] for a in alerts] == ["90 % ", "100 %"]
    assert len(live.series["s1"]) == 9
