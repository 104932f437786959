"""Local HTTP servers speaking the Anthropic Messages API and the OpenAI chat-completions API.

The driver's tests point the real `anthropic` and `openai` SDKs at these (through `base_url`), so
everything between the SDK and the wire is exercised. Replies are scripted per forced tool: each
request's `tool_choice` names the tool, and the next scripted reply for that tool is sent. A
scripted reply is a `Reply` (a tool call, or plain text) or an `HttpError` (429, 500, 529 ...).
Every request body is recorded for assertions.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


@dataclass
class Reply:
    tool_input: dict[str, Any] | None = None  # None: answer with text only, no tool call
    text: str = ""
    input_tokens: int = 1000
    output_tokens: int = 200
    cache_read: int = 0
    cache_write: int = 0


@dataclass
class HttpError:
    status: int
    error_type: str = "overloaded_error"
    message: str = "Overloaded"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Script:
    """Scripted replies per tool name; `fallback` per tool answers once its queue is empty."""

    queues: dict[str, deque[Reply | HttpError]] = field(default_factory=lambda: defaultdict(deque))
    fallback: dict[str, Reply] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    served: list[tuple[str, str]] = field(default_factory=list)  # (tool, "reply"|"error <status>")
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, tool: str, *replies: Reply | HttpError) -> Script:
        self.queues[tool].extend(replies)
        return self

    def next_for(self, tool: str) -> Reply | HttpError:
        with self.lock:
            q = self.queues.get(tool)
            if q:
                item = q.popleft()
            elif tool in self.fallback:
                item = self.fallback[tool]
            else:
                item = HttpError(
                    400, "invalid_request_error", f"the fake has no scripted reply left for {tool}"
                )
            self.served.append((tool, "reply" if isinstance(item, Reply) else f"error {item.status}"))
            return item

    def requests_for(self, tool: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if _forced_tool(r) == tool]


def _forced_tool(body: dict[str, Any]) -> str:
    choice = body.get("tool_choice") or {}
    if isinstance(choice, dict):
        if choice.get("type") == "tool":
            return str(choice.get("name"))
        if choice.get("type") == "function":
            return str(choice.get("function", {}).get("name"))
    # thinking mode: tool_choice auto; the tool the prompt asks for is the only one sent
    tools = body.get("tools") or []
    if len(tools) == 1:
        t = tools[0]
        return str(t.get("name") or t.get("function", {}).get("name"))
    return "?"


_ids = itertools.count(1)


def _anthropic(script: Script) -> Any:
    async def messages(request: Request) -> JSONResponse:
        body = await request.json()
        with script.lock:
            script.requests.append(body)
        tool = _forced_tool(body)
        item = script.next_for(tool)
        if isinstance(item, HttpError):
            return JSONResponse(
                {"type": "error", "error": {"type": item.error_type, "message": item.message}},
                status_code=item.status,
                headers=item.headers,
            )
        content: list[dict[str, Any]] = []
        if item.text:
            content.append({"type": "text", "text": item.text})
        if item.tool_input is not None:
            content.append(
                {"type": "tool_use", "id": f"toolu_{next(_ids):04d}", "name": tool, "input": item.tool_input}
            )
        return JSONResponse(
            {
                "id": f"msg_{next(_ids):04d}",
                "type": "message",
                "role": "assistant",
                "model": body.get("model", "fake"),
                "content": content,
                "stop_reason": "tool_use" if item.tool_input is not None else "end_turn",
                "stop_sequence": None,
                "usage": {
                    "input_tokens": item.input_tokens,
                    "output_tokens": item.output_tokens,
                    "cache_creation_input_tokens": item.cache_write,
                    "cache_read_input_tokens": item.cache_read,
                },
            }
        )

    return messages


def _openai(script: Script) -> Any:
    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        with script.lock:
            script.requests.append(body)
        tool = _forced_tool(body)
        item = script.next_for(tool)
        if isinstance(item, HttpError):
            return JSONResponse(
                {"error": {"message": item.message, "type": item.error_type, "code": None}},
                status_code=item.status,
                headers=item.headers,
            )
        message: dict[str, Any] = {"role": "assistant", "content": item.text or None}
        if item.tool_input is not None:
            message["tool_calls"] = [
                {
                    "id": f"call_{next(_ids):04d}",
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps(item.tool_input)},
                }
            ]
        return JSONResponse(
            {
                "id": f"chatcmpl-{next(_ids):04d}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "fake"),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if item.tool_input is not None else "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": item.input_tokens,
                    "completion_tokens": item.output_tokens,
                    "total_tokens": item.input_tokens + item.output_tokens,
                },
            }
        )

    return completions


@contextmanager
def serve(script: Script) -> Iterator[str]:
    """Run the fake on 127.0.0.1 on a free port in a thread; yield its base URL.

    The Anthropic SDK posts to `{base}/v1/messages`; the OpenAI SDK to `{base_url}/chat/completions`
    where its base URL conventionally ends in `/v1`: pass `f"{base}/v1"` to it.
    """
    app = Starlette(
        routes=[
            Route("/v1/messages", _anthropic(script), methods=["POST"]),
            Route("/v1/chat/completions", _openai(script), methods=["POST"]),
        ]
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(500):  # bounded wait for start-up (≤ 5 s)
        if server.started:
            break
        threading.Event().wait(0.01)
    else:
        raise RuntimeError("the fake LLM server did not start within 5 s")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=5)
        sock.close()
