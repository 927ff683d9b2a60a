"""Small helpers shared by the end-to-end tests: result checks that say what came back."""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

import anyio
from mcp import types


def dump(result: Any) -> str:
    """A tool result as the JSON the server sent (for assertion messages)."""
    if hasattr(result, "model_dump"):
        return json.dumps(result.model_dump(by_alias=True, exclude_none=True, mode="json"), indent=1)[:4000]
    return repr(result)[:4000]


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if getattr(c, "type", None) == "text")


def ok(result: types.CallToolResult) -> dict[str, Any]:
    """Assert a successful tool result and return its structuredContent."""
    assert not result.is_error, f"expected success, got an error result:\n{dump(result)}"
    sc = result.structured_content
    assert isinstance(sc, dict), f"a successful result has structuredContent:\n{dump(result)}"
    return sc


def err(result: types.CallToolResult, code: str | None = None) -> dict[str, Any]:
    """Assert an isError tool result with aido's error shape (and `code` if given)."""
    assert result.is_error is True, f"expected isError: true, got:\n{dump(result)}"
    sc = result.structured_content
    assert isinstance(sc, dict), f"an error result has structuredContent:\n{dump(result)}"
    assert isinstance(sc.get("code"), str) and sc["code"], f"error has a code:\n{dump(result)}"
    assert isinstance(sc.get("message"), str) and sc["message"], f"error has a message:\n{dump(result)}"
    if code is not None:
        assert sc["code"] == code, f"expected code {code!r}, got {sc['code']!r}:\n{dump(result)}"
    return sc


def seq_of(result: types.CallToolResult) -> int:
    meta = result.meta or {}
    seq = meta.get("aido/seq")
    assert isinstance(seq, int) and seq >= 1, f"_meta has aido/seq:\n{dump(result)}"
    return seq


class Aido:
    """A connected SDK session plus the initialize result, with shorthand for calls."""

    def __init__(self, session: Any, init: types.InitializeResult):
        self.session = session
        self.init = init

    async def call(self, name: str, args: dict[str, Any] | None = None, **kw: Any) -> types.CallToolResult:
        return await self.session.call_tool(name, args if args is not None else {}, **kw)

    async def ok(self, name: str, args: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        return ok(await self.call(name, args, **kw))

    async def err(self, name: str, args: dict[str, Any] | None = None, code: str | None = None) -> dict[str, Any]:
        return err(await self.call(name, args), code)


async def eventually(check: Callable[[], bool], timeout: float = 3.0) -> bool:
    """Poll `check` until it is true or `timeout` seconds pass (for notifications, which the
    SDK may hand to callbacks just after the response that followed them on the wire)."""
    with anyio.move_on_after(timeout):
        while not check():
            await anyio.sleep(0.02)
    return check()


Async = Callable[..., Awaitable[Any]]
