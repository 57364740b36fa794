"""pynvim's msgpack-rpc client, unmodified, as an independent third-party client.

pynvim also sends Neovim's ``nvim_set_client_info`` notification on connect: the daemon must
ignore it (unknown notifications are ignored).
"""

from __future__ import annotations

import threading

import pytest
from pynvim.msgpack_rpc import socket_session

from memman.sync_client import SyncClient
from tests.helpers import daemon_process


class RpcError(Exception):
    def __init__(self, err: list) -> None:
        super().__init__(err)
        self.code, self.message = err[0], err[1]


@pytest.fixture(scope="module")
def daemon():
    with daemon_process() as d:
        yield d


@pytest.fixture
def session(daemon):
    s = socket_session(str(daemon.socket))
    s.error_wrapper = RpcError
    yield s
    s.close()


def test_api_info(session) -> None:
    info = session.request("memman_get_api_info")
    assert info["api_level"] >= 1
    names = {m["name"] for m in info["methods"]}
    assert {"memman_session_add", "memman_subscribe", "memman_get_api_info"} <= names
    assert "memman_session_event" in info["events"]


def test_method_name_as_bin(session) -> None:
    assert session.request(b"memman_ping") == "pong"


def test_unknown_method_error(session) -> None:
    with pytest.raises(RpcError) as exc:
        session.request("memman_no_such_thing", 1, 2)
    assert exc.value.code == -32601
    assert exc.value.message == "unknown method 'memman_no_such_thing'"
    assert session.request("memman_ping") == "pong"  # the connection stays usable


def test_invalid_params_name_the_parameter(session) -> None:
    with pytest.raises(RpcError) as exc:
        session.request("memman_session_add", 42, {})
    assert exc.value.code == -32602
    assert "session_id" in exc.value.message


def test_subscription_event(session, daemon) -> None:
    sub = session.request("memman_subscribe", ["session"], {"session_id": "pyn"})
    assert sub["subscription"] >= 1

    def other_agent() -> None:
        with SyncClient(daemon.socket, timeout=30) as c:
            c.call("memman_session_open", "pyn", {})
            c.call("memman_session_add", "pyn", {"role": "user", "content": "hello from afar"})

    t = threading.Thread(target=other_agent)
    t.start()
    events = []
    while not any(e["kind"] == "entry_added" for e in events):
        kind, name, args = session.next_message()  # blocks; pytest-timeout guards it
        assert kind == "notification" and name == "memman_session_event", (kind, name)
        events.append(args[0])
    t.join(30)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    added = next(e for e in events if e["kind"] == "entry_added")
    assert added["session_id"] == "pyn"
    assert added["subscription"] == sub["subscription"]
    assert added["entry"]["content"] == "hello from afar"
