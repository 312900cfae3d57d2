"""A local OpenAI-compatible ``/v1/chat/completions`` server for any :class:`AsyncChatModel`
(the tests serve a transformers model on loopback). It cancels a generation as soon as its
client disconnects and counts what it served, so concurrency and cancellation can be checked."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from icml_tipex.chat import AsyncChatModel
from icml_tipex.openai_http import read_http_message


class ChatServer:
    """Serve ``model`` on ``host:port`` (port 0: any free port) in the running event loop.
    ``active``/``max_active``: requests in progress now / at most; ``cancelled``: generations
    stopped because the client went away."""

    def __init__(self, model: AsyncChatModel, host: str = "127.0.0.1", port: int = 0) -> None:
        self.model, self.host, self.port = model, host, port
        self.active = self.max_active = self.completed = self.cancelled = self.requests = 0
        self._server: asyncio.base_events.Server | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> ChatServer:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _respond(self, writer: asyncio.StreamWriter, code: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Server Error"}[code]
        writer.write(f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        await writer.drain()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.requests += 1
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            start, _, body = await read_http_message(reader)
            method, path = (start.split() + ["", ""])[:2]
            if method != "POST" or path not in ("/v1/chat/completions", "/chat/completions"):
                await self._respond(writer, 404, {"error": f"no route {method} {path}"})
                return
            try:
                req = json.loads(body)
                messages = req["messages"]
            except (ValueError, KeyError, TypeError):
                await self._respond(writer, 400, {"error": "body must be JSON with 'messages'"})
                return
            gen = asyncio.ensure_future(self.model.generate(
                messages, temperature=float(req.get("temperature", 0.0)),
                seed=int(req.get("seed", 0)), max_tokens=int(req.get("max_tokens", 256))))
            gone = asyncio.ensure_future(reader.read(1))  # b"" once the client hangs up
            await asyncio.wait({gen, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not gen.done():
                gen.cancel()
                self.cancelled += 1
                await asyncio.gather(gen, return_exceptions=True)
                return
            gone.cancel()
            try:
                c = gen.result()
            except Exception as e:  # noqa: BLE001 - reported to the client
                await self._respond(writer, 500, {"error": f"{type(e).__name__}: {e}"})
                return
            self.completed += 1
            await self._respond(writer, 200, {
                "object": "chat.completion", "model": getattr(self.model, "name", "model"),
                "choices": [{"index": 0, "finish_reason": c.finish_reason,
                             "message": {"role": "assistant", "content": c.text}}],
                "usage": {"prompt_tokens": c.prompt_tokens,
                          "completion_tokens": c.completion_tokens,
                          "total_tokens": c.total_tokens}})
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.active -= 1
            writer.close()


class ServerThread:
    """Run a :class:`ChatServer` on its own event loop in a daemon thread (a context manager)."""

    def __init__(self, model: AsyncChatModel, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = ChatServer(model, host, port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> ChatServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(timeout=30)
        return self.server

    def __exit__(self, *exc: Any) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until no request is in progress (True) or ``timeout`` s pass (False)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.server.active == 0:
                return True
            time.sleep(0.01)
        return False
