"""Login sessions: a random cookie value mapped to the bearer token the user typed, kept only in this process."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

# A session unused this long is forgotten; the user logs in again.
IDLE_SECONDS = 12 * 3600.0
COOKIE = "pykubevirt-console"


@dataclass
class Session:
    token: str
    username: str
    last_used: float


class Sessions:
    """In-memory sessions: restarting the console logs everyone out, and no token ever reaches disk."""

    def __init__(self, idle_seconds: float = IDLE_SECONDS) -> None:
        self.idle_seconds = idle_seconds
        self._by_id: dict[str, Session] = {}

    def create(self, token: str, username: str) -> str:
        self._expire()
        session_id = secrets.token_urlsafe(32)
        self._by_id[session_id] = Session(token, username, time.monotonic())
        return session_id

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        session = self._by_id.get(session_id)
        if session is None:
            return None
        now = time.monotonic()
        if now - session.last_used > self.idle_seconds:
            del self._by_id[session_id]
            return None
        session.last_used = now
        return session

    def drop(self, session_id: str | None) -> None:
        if session_id:
            self._by_id.pop(session_id, None)

    def _expire(self) -> None:
        now = time.monotonic()
        for key in [k for k, s in self._by_id.items() if now - s.last_used > self.idle_seconds]:
            del self._by_id[key]
