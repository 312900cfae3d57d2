"""A client for any OpenAI-compatible ``/chat/completions`` endpoint over plain asyncio streams
(no HTTP library needed). One connection per request: cancelling the awaiting task closes the
socket, which a server (ours, vLLM, llama.cpp) sees as the client going away."""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any
from urllib.parse import urlsplit

from icml_tipex.chat import Completion, Message, ModelCallError, messages_tokens


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int((await reader.readline()).strip().split(b";")[0], 16)
            if size == 0:
                await reader.readline()
                return b"".join(chunks)
            chunks.append(await reader.readexactly(size))
            await reader.readline()
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    return await reader.read()


async def read_http_message(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    """Start line, lower-cased headers and body of one HTTP/1.1 message."""
    start = (await reader.readline()).decode("latin-1").strip()
    if not start:
        raise ConnectionError("connection closed before a request or response line")
    headers: dict[str, str] = {}
    while True:
        line = (await reader.readline()).decode("latin-1")
        if line in ("\r\n", "\n", ""):
            break
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return start, headers, await _read_body(reader, headers)


class OpenAIChatModel:
    """``base_url`` like ``http://127.0.0.1:8000/v1``; ``model`` is sent as the model name."""

    virtual_time = False

    def __init__(self, base_url: str, model: str = "default", *, api_key: str | None = None,
                 extra_body: dict[str, Any] | None = None) -> None:
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"base_url={base_url!r} must look like http://host:port/v1")
        self.host, self.https = u.hostname, u.scheme == "https"
        self.port = u.port or (443 if self.https else 80)
        self.path = u.path.rstrip("/") + "/chat/completions"
        self.model, self.api_key, self.extra = model, api_key, dict(extra_body or {})
        self.name = f"openai:{model}@{self.host}:{self.port}"

    def count_tokens(self, messages: list[Message]) -> int:
        return messages_tokens(messages)

    async def generate(self, messages: list[Message], *, temperature: float = 0.0,
                       seed: int = 0, max_tokens: int = 256) -> Completion:
        body = json.dumps({"model": self.model, "messages": messages, "temperature": temperature,
                           "seed": seed, "max_tokens": max_tokens, **self.extra}).encode()
        head = [f"POST {self.path} HTTP/1.1", f"Host: {self.host}:{self.port}",
                "Content-Type: application/json", f"Content-Length: {len(body)}",
                "Connection: close"]
        if self.api_key:
            head.append(f"Authorization: Bearer {self.api_key}")
        try:
            reader, writer = await asyncio.open_connection(
                self.host, self.port, ssl=ssl.create_default_context() if self.https else None)
        except OSError as e:
            raise ModelCallError(f"cannot connect to {self.host}:{self.port}: {e}") from e
        try:
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            await writer.drain()
            status, _, data = await read_http_message(reader)
        finally:
            writer.close()  # on cancellation too: the server sees the client leave
        code = int(status.split()[1]) if len(status.split()) > 1 else 0
        if code != 200:
            raise ModelCallError(f"HTTP {code} from {self.name}: {data[:200]!r}")
        try:
            d = json.loads(data)
            text = d["choices"][0]["message"]["content"] or ""
            usage = d.get("usage", {})
            finish = d["choices"][0].get("finish_reason") or "stop"
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise ModelCallError(f"unexpected reply from {self.name}: {e}") from e
        return Completion(text, int(usage.get("prompt_tokens", messages_tokens(messages))),
                          int(usage.get("completion_tokens", 0)), finish)
