"""Bearer-token check in front of the streamable-HTTP app.

Every HTTP request must carry ``Authorization: Bearer <token>``; anything else gets 401
with a ``WWW-Authenticate: Bearer`` header and a JSON body saying what to send, before
the MCP app sees it. The comparison takes the same time whatever the token
(:func:`hmac.compare_digest`). Lifespan events pass through.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class BearerTokenGate:
    """ASGI middleware admitting only requests with the bearer ``token``."""

    def __init__(self, app: App, token: str) -> None:
        if not token:
            raise ValueError("an empty token would admit anybody")
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._admitted(scope):
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            {"error": "unauthorized", "hint": "send the server's token as `Authorization: Bearer TOKEN`"}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="envlayer-mcp"'),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _admitted(self, scope: Scope) -> bool:
        given = [value for name, value in scope.get("headers", []) if name.lower() == b"authorization"]
        return len(given) == 1 and hmac.compare_digest(given[0], self._expected)
