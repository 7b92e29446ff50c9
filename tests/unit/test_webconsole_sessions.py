"""The web console's sessions: random ids, the token kept only in memory, forgotten on logout or when idle. Pure."""

from __future__ import annotations

from pykubevirt.webconsole.sessions import Sessions


def test_a_session_maps_a_random_id_to_the_token_until_dropped() -> None:
    sessions = Sessions()
    first = sessions.create("token-a", "alice")
    second = sessions.create("token-a", "alice")
    assert first != second and len(first) >= 40 and "token-a" not in first
    session = sessions.get(first)
    assert session is not None and (session.token, session.username) == ("token-a", "alice")
    sessions.drop(first)
    assert sessions.get(first) is None
    assert sessions.get(second) is not None
    assert sessions.get(None) is None and sessions.get("") is None and sessions.get("guess") is None


def test_an_idle_session_is_forgotten() -> None:
    sessions = Sessions(idle_seconds=-1.0)
    session_id = sessions.create("token", "bob")
    assert sessions.get(session_id) is None
