"""codemode for Python: code mode in-process.

Instead of hundreds of tool schemas, the model sees two tools, ``exec`` and
``wait``, and writes a small JavaScript or TypeScript program that finds
and calls your tools. The program runs in a QuickJS VM compiled to
WebAssembly (wasmtime) inside this process, under hard limits; the GIL is
released while it runs. See ``docs/python.md`` in the repository.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal, Union

from . import _native
from ._tools import Tool, as_tool, to_json, tool

__all__ = ["CodeMode", "Tool", "tool", "Result", "ApprovalAnswer", "HookAnswer"]
__version__ = "0.1.0"

#: The result union of ``exec`` and ``wait`` (docs/results-and-errors.md):
#: ``{"status": "completed", "value": ...}``, ``{"status": "waiting",
#: "runId": ..., "reason": ...}`` or ``{"status": "failed", "error": ...,
#: "code": ...}``, each with ``telemetry`` and optional ``output``,
#: ``nestedCalls``, ``pendingToolCalls``.
Result = dict[str, Any]

#: ``True`` runs the call, ``False`` or ``{"deny": reason}`` refuses it,
#: ``None`` leaves it waiting for ``approve``/``deny``.
ApprovalAnswer = Union[bool, Mapping[str, str], None]

#: ``None`` allows, ``{"block": reason}`` refuses, ``{"input": new}`` goes
#: on with a new input.
HookAnswer = Union[Mapping[str, Any], None]

Callback = Callable[[dict[str, Any]], Any]

#: A sync tool whose recent calls took less than this runs inline, on the
#: runtime's thread that started the call; slower ones run on the pool.
_INLINE_SECONDS = 0.001


def _message(error: BaseException) -> str:
    text = str(error)
    return text if text else type(error).__name__


class _BackgroundLoop:
    """An event loop on a daemon thread, for async tools and callbacks when
    no caller's loop is running (``exec_sync``)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def get(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="codemode-tools", daemon=True).start()
                self._loop = loop
            return self._loop

    def stop(self) -> None:
        with self._lock:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop = None


class CodeMode:
    """Code mode in-process: ``exec`` and ``wait`` for a model, your tools and
    MCP servers hidden behind them.

    ``tools``: callables (sync or ``async def``) or ``codemode.Tool``; the
    name, description and input schema come from the function (name,
    docstring, type hints or a pydantic model parameter) unless given with
    ``@codemode.tool(...)``. ``mcp_servers``: the gateway config's
    ``mcpServers``. ``config``: ``tools.codeMode``. ``store``: ``"memory"``
    (default), ``"file:PATH"`` or ``"redis://HOST:PORT/DB"``.
    """

    def __init__(
        self,
        tools: Iterable[Callable[..., Any] | Tool] = (),
        *,
        mcp_servers: Mapping[str, Mapping[str, Any]] | None = None,
        config: Mapping[str, Any] | None = None,
        store: str | None = None,
        scripted: Iterable[Mapping[str, Any]] | None = None,
        approve: Callable[[dict[str, Any]], ApprovalAnswer | Awaitable[ApprovalAnswer]] | None = None,
        before_tool_call: Callable[[dict[str, Any]], HookAnswer | Awaitable[HookAnswer]] | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        owner: str | None = None,
    ) -> None:
        by_id: dict[str, Tool] = {}
        for i, entry in enumerate(tools):
            made = as_tool(entry)
            if made.id in by_id:
                raise TypeError(f"codemode: tools[{i}]: a tool with id {made.id} is already defined")
            by_id[made.id] = made
        for label, fn in (("approve", approve), ("before_tool_call", before_tool_call), ("on_progress", on_progress)):
            if fn is not None and not callable(fn):
                raise TypeError(f"codemode: {label} must be callable")
        if config is not None and not isinstance(config, Mapping):
            raise TypeError("codemode: config must be a mapping (the tools.codeMode settings)")
        if mcp_servers is not None and not isinstance(mcp_servers, Mapping):
            raise TypeError("codemode: mcp_servers must be a mapping {name: server}")
        if store is not None and not isinstance(store, str):
            raise TypeError('codemode: store must be a string: "memory", "file:PATH" or "redis://HOST:PORT/DB"')
        self._tools = by_id
        self._approve = approve
        self._before_tool_call = before_tool_call
        self._on_progress = on_progress
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._background = _BackgroundLoop()
        self._pool = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="codemode-tool")
        self._durations: dict[str, float] = {}
        options = {
            "document": {"tools": {"codeMode": dict(config or {})}, "mcpServers": dict(mcp_servers or {})},
            "tools": [t.definition() for t in by_id.values()],
            "scripted": list(scripted) if scripted is not None else None,
            "store": store,
            "agentId": agent_id,
            "sessionId": session_id,
            "owner": owner,
            "host": "python",
        }
        self._native = _native.open(json.dumps(options), self._dispatch, approve is not None, before_tool_call is not None)

    @classmethod
    async def open(cls, tools: Iterable[Callable[..., Any] | Tool] = (), **options: Any) -> CodeMode:
        """Opens one without blocking the event loop (MCP servers take a while to start)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: cls(tools, **options))

    # -- the runtime's requests ------------------------------------------

    def _dispatch(self, request_json: str) -> None:
        """Called by the runtime (GIL held, one of its threads): schedules the
        work and returns at once; the answer goes back by complete_request."""
        request = json.loads(request_json)
        token = request.pop("token")
        kind = request.pop("kind")
        if kind == "tool":
            found = self._tools.get(request.get("toolId", ""))
            if found is None:
                self._answer(token, {"error": f"no Python tool {request.get('toolId')}"})
                return
            if not found.is_async and self._quick(found.id):
                self._run_inline(token, found, request.get("input"))
                return
            self._schedule(token, found.is_async, lambda: found.call(request.get("input")), self._tool_answer)
        elif kind == "approve" and self._approve is not None:
            fn = self._approve
            self._schedule(token, inspect.iscoroutinefunction(fn), lambda: fn(request), _approval_answer)
        elif kind == "hook" and self._before_tool_call is not None:
            hook = self._before_tool_call
            self._schedule(token, inspect.iscoroutinefunction(hook), lambda: hook(request), _hook_answer)
        else:
            self._answer(token, {"error": f"unknown request kind {kind}"})

    def _quick(self, tool_id: str) -> bool:
        """Whether a sync tool has been answering in well under a
        millisecond (or has not run yet): such calls run right here, on
        the runtime's thread that started them, and their answer is there
        before the runtime looks (no thread hop). A slower one goes to the
        thread pool, so a slow tool never holds up the cell's other calls
        more than once."""
        return self._durations.get(tool_id, 0.0) < _INLINE_SECONDS

    def _run_inline(self, token: int, found: Tool, arguments: Any) -> None:
        started = time.perf_counter()
        try:
            value = found.call(arguments)
            if inspect.isawaitable(value):
                # A sync function that returned an awaitable: finish it on a loop.
                self._schedule(token, True, lambda: value, self._tool_answer)
                return
            result = self._tool_answer(value)
        except Exception as e:  # noqa: BLE001 - a tool's failure is its call's error
            result = {"error": _message(e)}
        finally:
            took = time.perf_counter() - started
            old = self._durations.get(found.id, 0.0)
            # About the last four calls.
            self._durations[found.id] = old + (took - old) / 4 if old else took
        self._answer(token, result)

    def _tool_answer(self, value: Any) -> dict[str, Any]:
        return {} if value is None else {"ok": value}

    def _schedule(
        self,
        token: int,
        is_async: bool,
        call: Callable[[], Any],
        shape: Callable[[Any], dict[str, Any]],
    ) -> None:
        """Runs ``call`` where it belongs (async: on the caller's event loop,
        or a background one; sync: on a worker thread, never the runtime's)
        and answers ``token`` with its shaped value, or its exception as
        ``{"error": message}``."""

        async def on_loop() -> None:
            try:
                result = shape(await _maybe_await(call()))
            except Exception as e:  # noqa: BLE001 - a tool's failure is its call's error
                result = {"error": _message(e)}
            self._answer(token, result)

        def on_thread() -> None:
            try:
                value = call()
                if inspect.isawaitable(value):
                    value = asyncio.run_coroutine_threadsafe(_maybe_await(value), self._tool_loop()).result()
                result = shape(value)
            except Exception as e:  # noqa: BLE001
                result = {"error": _message(e)}
            self._answer(token, result)

        if is_async:
            asyncio.run_coroutine_threadsafe(on_loop(), self._tool_loop())
        else:
            self._pool.submit(on_thread)

    def _tool_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is not None and loop.is_running() and not loop.is_closed():
            return loop
        return self._background.get()

    def _answer(self, token: int, answer: dict[str, Any]) -> None:
        """Answers ``token``, always: a result JSON cannot encode (a cycle, a
        NaN, nesting past the recursion limit, an unknown type) becomes that
        call's error; an answer that never came would hold the call until
        the cell's deadline."""
        try:
            text = to_json(answer)
        except Exception as e:  # noqa: BLE001 - RecursionError, TypeError, ValueError, ...
            text = json.dumps({"error": f"the tool's result is not JSON: {_message(e)}"})
        _native.complete_request(token, text)

    def _progress(self, on_progress: Callable[[dict[str, Any]], None] | None) -> Callable[[str], None] | None:
        if on_progress is None:
            return None

        def report(event: str) -> None:
            try:
                on_progress(json.loads(event))
            except Exception:  # noqa: BLE001 - a failing progress callback must not fail the run
                pass

        return report

    # -- exec and wait -----------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("codemode: this CodeMode is closed")

    def exec_sync(
        self,
        code: str,
        language: Literal["javascript", "typescript"] | None = None,
        *,
        call_id: str | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> Result:
        """Runs a cell and blocks until its result (the GIL is released meanwhile)."""
        _refuse_inside_loop("exec_sync", "exec")
        return self._run("exec", _exec_input(code, language), call_id, on_progress)

    def wait_sync(
        self,
        run_id: str,
        *,
        call_id: str | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> Result:
        """Resumes a waiting run and blocks until its result."""
        _refuse_inside_loop("wait_sync", "wait")
        return self._run("wait", {"runId": run_id}, call_id, on_progress)

    async def exec(
        self,
        code: str,
        language: Literal["javascript", "typescript"] | None = None,
        *,
        call_id: str | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> Result:
        """Runs a cell. Returns the result union; a cell's own errors are
        ``failed`` results, never exceptions. Async tools run on this loop."""
        return await self._run_async("exec", _exec_input(code, language), call_id, on_progress)

    async def wait(
        self,
        run_id: str,
        *,
        call_id: str | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> Result:
        """Resumes a waiting run."""
        return await self._run_async("wait", {"runId": run_id}, call_id, on_progress)

    async def run_tool(self, name: str, arguments: Mapping[str, Any], *, call_id: str | None = None) -> Result:
        """Runs ``exec`` or ``wait`` with a model's arguments as they are (the
        runtime checks them: a missing ``code`` is an ``invalid_input``
        result). For framework adapters."""
        if name not in ("exec", "wait"):
            raise ValueError(f"codemode: run_tool: no tool {name!r}; the model sees only exec and wait")
        return await self._run_async(name, dict(arguments), call_id, None)

    async def _run_async(
        self,
        control: str,
        body: dict[str, Any],
        call_id: str | None,
        on_progress: Callable[[dict[str, Any]], None] | None,
    ) -> Result:
        """``_run`` on a worker thread; async tools run on this loop meanwhile."""
        self._loop = asyncio.get_running_loop()
        return await self._loop.run_in_executor(None, self._run, control, body, call_id, on_progress)

    def _run(
        self,
        control: str,
        body: dict[str, Any],
        call_id: str | None,
        on_progress: Callable[[dict[str, Any]], None] | None,
    ) -> Result:
        self._check_open()
        progress = self._progress(on_progress or self._on_progress)
        method = self._native.exec if control == "exec" else self._native.wait
        result: Result = json.loads(method(json.dumps(body), call_id, progress))
        return result

    # -- the rest ------------------------------------------------------------

    def surface(self) -> list[dict[str, Any]]:
        """Exactly ``exec`` and ``wait`` as ``{"name", "description", "inputSchema"}``, for the model."""
        tools: list[dict[str, Any]] = json.loads(self._native.surface())
        return tools

    def catalog(self) -> list[str]:
        """The hidden tool ids (for you, not the model)."""
        return list(self._native.catalog_ids())

    def diagnostics(self) -> list[str]:
        """Config warnings, and MCP servers that did not start."""
        return list(self._native.diagnostics())

    def pending_approvals(self) -> list[dict[str, Any]]:
        """Calls waiting for a decision."""
        pending: list[dict[str, Any]] = json.loads(self._native.pending_approvals())
        return pending

    def approve(self, run_id: str, call_id: str) -> None:
        """Approves a waiting call; the next ``wait`` sees it run."""
        self._native.approve(run_id, call_id)

    def deny(self, run_id: str, call_id: str, reason: str = "denied") -> None:
        """Denies a waiting call: the cell sees ``approval_denied`` with ``reason``."""
        self._native.deny(run_id, call_id, reason)

    def close(self) -> None:
        """Aborts running cells, stops the MCP servers. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._native.close()
        self._pool.shutdown(wait=False)
        self._background.stop()

    def __enter__(self) -> CodeMode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> CodeMode:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


def _approval_answer(answer: Any) -> dict[str, Any]:
    if answer is True:
        return {"decision": "approve"}
    if answer is False:
        return {"decision": "deny", "reason": "denied"}
    if answer is None:
        return {"decision": "later"}
    if isinstance(answer, Mapping) and isinstance(answer.get("deny"), str):
        return {"decision": "deny", "reason": answer["deny"]}
    return {"decision": "invalid", "answer": repr(answer)}


def _hook_answer(answer: Any) -> dict[str, Any]:
    if answer is None:
        return {"allow": True}
    if isinstance(answer, Mapping) and "block" in answer:
        return {"block": str(answer["block"])}
    if isinstance(answer, Mapping) and "input" in answer:
        return {"rewrite": answer["input"]}
    return {"invalid": repr(answer)}


def _exec_input(code: str, language: str | None) -> dict[str, Any]:
    if not isinstance(code, str):
        raise TypeError("codemode: exec(code): code must be a string")
    body: dict[str, Any] = {"code": code}
    if language is not None:
        body["language"] = language
    return body


def _refuse_inside_loop(name: str, instead: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(f"codemode: {name}() cannot be called from a running event loop (it would block it): use await cm.{instead}(...)")
