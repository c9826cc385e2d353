"""The in-process API as a user installs it: the built wheel in a fresh venv
(``cargo xtask test-python``), then ``from codemode import CodeMode``."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pydantic
import pytest

from codemode import CodeMode, tool

EVERYTHING = os.environ.get("CODEMODE_EVERYTHING")


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def multiply(a: float, b: float) -> float:
    """Multiply two numbers (async)."""
    await asyncio.sleep(0.001)
    return a * b


def test_sync_and_async_tools_and_a_failing_one_as_a_tool_error() -> None:
    threads: list[str] = []

    def where(tag: str) -> str:
        """Which thread runs a sync tool (a slow one: 5 ms)."""
        threads.append(threading.current_thread().name)
        time.sleep(0.005)
        return tag

    @tool(name="boom", description="Always fails")
    def boom() -> None:
        raise RuntimeError("the disk is on fire")

    async def rejects() -> None:
        raise ValueError("later fire")

    def not_json() -> object:
        return object()

    with CodeMode(tools=[add, multiply, where, boom, rejects, not_json]) as cm:
        assert sorted(cm.catalog()) == [
            "client:app:add", "client:app:boom", "client:app:multiply",
            "client:app:not_json", "client:app:rejects", "client:app:where",
        ]
        r = cm.exec_sync(
            """
            const sum = await tools.add({ a: 2, b: 3 });
            const product = await tools.multiply({ a: sum, b: 2 });
            for (let i = 0; i < 3; i++) await tools.where({ tag: "x" });
            const errors = [];
            for (const name of ["boom", "rejects", "not_json"]) {
              try { await tools[name]({}); } catch (e) { errors.push(e.message); }
            }
            return { sum, product, errors };""",
            call_id="call_1",
        )
        assert r["status"] == "completed", r
        assert r["value"]["sum"] == 5 and r["value"]["product"] == 10
        errors = r["value"]["errors"]
        assert "the disk is on fire" in errors[0]
        assert "later fire" in errors[1]
        assert "not JSON" in errors[2]
        assert [c["outcome"] for c in r["nestedCalls"]] == ["ok"] * 5 + ["failed"] * 3
        # A quick sync tool runs where the runtime started the call; once
        # it is known to be slow, on the instance's pool.
        assert len(threads) == 3 and all(t.startswith("codemode-tool") for t in threads[1:]), threads


class Order(pydantic.BaseModel):
    item: str
    quantity: int = 1


def test_schemas_come_from_type_hints_and_pydantic_models() -> None:
    def place(order: Order) -> dict[str, Any]:
        """Place an order."""
        return {"item": order.item, "quantity": order.quantity}

    def find_items(query: str, limit: int = 5) -> list[str]:
        """Search the shelf."""
        return [query] * limit

    with CodeMode(tools=[place, find_items]) as cm:
        r = cm.exec_sync("""
            const d = await tools.describe("place");
            const s = await tools.describe("find_items");
            return { place: d, search: s, placed: await tools.place({ item: "tea" }), found: await tools.find_items({ query: "x", limit: 2 }) };""")
        assert r["status"] == "completed", r
        v = r["value"]
        assert v["placed"] == {"item": "tea", "quantity": 1}
        assert v["found"] == ["x", "x"]
        text = str(v["search"])
        assert "query" in text and "limit" in text
        assert "item" in str(v["place"])
        bad = cm.exec_sync("try { await tools.place({ quantity: 2 }) } catch (e) { return e.message }")
        assert "item" in bad["value"], bad

    class Local(pydantic.BaseModel):
        x: int

    def local(value: Local) -> int:
        return value.x

    # With `from __future__ import annotations`, a class defined inside a
    # function cannot be resolved from the hint: said at once, not guessed.
    with pytest.raises(TypeError, match="local: cannot resolve the type hint of parameter value"):
        CodeMode(tools=[local])
    with CodeMode(tools=[tool(local, input_schema={"type": "object", "properties": {"value": {"type": "object"}}})]) as cm:
        assert "client:app:local" in cm.catalog()


def test_cell_errors_are_failed_results_and_bad_options_raise_naming_the_field() -> None:
    with CodeMode(tools=[add]) as cm:
        thrown = cm.exec_sync("throw new Error('nope')")
        assert thrown["status"] == "failed" and "nope" in thrown["error"]
        unknown = cm.exec_sync("return await tools.nosuch({})")
        assert unknown["status"] == "failed" and "nosuch" in unknown["error"]
        ts = cm.exec_sync("const n: number = await tools.add({ a: 1, b: 1 }); return n;", "typescript")
        assert ts["value"] == 2
    with pytest.raises(TypeError, match="no usable name"):
        CodeMode(tools=[lambda: 1])
    with pytest.raises(TypeError, match="already defined"):
        CodeMode(tools=[add, add])
    with pytest.raises(TypeError, match="approve must be callable"):
        CodeMode(approve="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeoutMs"):
        CodeMode(config={"timeoutMs": "soon"})
    with pytest.raises(ValueError, match="options.store"):
        CodeMode(store="ftp://x")
    with pytest.raises(ValueError, match="reslt"):
        CodeMode(scripted=[{"source": "client", "name": "x", "echoInput": True, "reslt": 1}])
    cm = CodeMode()
    cm.close()
    with pytest.raises(RuntimeError, match="closed"):
        cm.exec_sync("return 1")


def test_surface_is_exactly_exec_and_wait() -> None:
    with CodeMode(tools=[add]) as cm:
        surface = cm.surface()
        assert [t["name"] for t in surface] == ["exec", "wait"]
        assert surface[0]["inputSchema"]["properties"]["code"]
        assert surface[1]["inputSchema"]["required"] == ["runId"]
        assert "Add two numbers" not in str(surface)


def test_a_suspended_run_is_resumed_and_progress_reaches_the_callback() -> None:
    events: list[dict[str, Any]] = []
    with CodeMode(tools=[add], on_progress=events.append) as cm:
        first = cm.exec_sync("const a = await tools.add({ a: 1, b: 2 }); progress(1, 2, 'half'); await yield_control(); return await tools.add({ a, b: 10 });")
        assert first["status"] == "waiting" and first["reason"] == "yield", first
        assert re.fullmatch(r"run_[0-9a-f]{32}", first["runId"])
        done = cm.wait_sync(first["runId"])
        assert done["status"] == "completed" and done["value"] == 13, done
        assert cm.wait_sync(first["runId"])["status"] == "failed"
    assert any(e["kind"] == "cell" and e["message"] == "half" for e in events), events
    assert any(e["kind"] == "callFinished" and e["toolId"] == "client:app:add" and e["ok"] for e in events)


def test_approvals_sync_and_async_callbacks_and_later_decisions() -> None:
    asked: list[dict[str, Any]] = []
    answer: Any = True

    def approve(request: dict[str, Any]) -> Any:
        asked.append(request)
        return answer

    guarded = tool(add, needs_approval=True)
    with CodeMode(tools=[guarded], approve=approve) as cm:
        assert cm.exec_sync("return await tools.add({ a: 4, b: 4 })")["value"] == 8
        assert asked[0]["toolId"] == "client:app:add" and "4" in asked[0]["inputSummary"]
        answer = {"deny": "not on Sundays"}
        denied = cm.exec_sync("try { return await tools.add({ a: 1, b: 1 }) } catch (e) { return [e.code, e.message] }")
        assert denied["value"][0] == "approval_denied" and "not on Sundays" in denied["value"][1]
        answer = None
        held = cm.exec_sync("return await tools.add({ a: 5, b: 5 })")
        assert held["status"] == "waiting" and held["reason"] == "approval", held
        pending = cm.pending_approvals()
        assert len(pending) == 1 and pending[0]["runId"] == held["runId"]
        cm.approve(held["runId"], pending[0]["callId"])
        assert cm.wait_sync(held["runId"])["value"] == 10
        answer = "maybe"
        broken = cm.exec_sync("try { return await tools.add({ a: 1, b: 1 }) } catch (e) { return e.code }")
        assert broken["value"] == "approval_denied"

    async def approve_async(request: dict[str, Any]) -> bool:
        await asyncio.sleep(0)
        return request["tool"] == "add"

    with CodeMode(tools=[guarded], approve=approve_async) as cm:
        assert cm.exec_sync("return await tools.add({ a: 2, b: 2 })")["value"] == 4


def test_hooks_block_or_rewrite_and_a_raising_hook_blocks() -> None:
    def hook(event: dict[str, Any]) -> Any:
        if event["toolKind"] != "tool":
            return None
        a = event["input"]["a"]
        if a == 13:
            return {"block": "unlucky"}
        if a == 7:
            return {"input": {"a": 70, "b": event["input"]["b"]}}
        if a == 0:
            raise RuntimeError("hook crashed")
        return None

    with CodeMode(tools=[add], before_tool_call=hook) as cm:
        r = cm.exec_sync("""
            const out = {};
            for (const a of [1, 7, 13, 0]) {
              try { out[a] = await tools.add({ a, b: 1 }); } catch (e) { out[a] = e.code + ": " + e.message; }
            }
            return out;""")
        v = r["value"]
        assert v["1"] == 2 and v["7"] == 71
        assert v["13"].startswith("approval_denied") and "unlucky" in v["13"]
        assert v["0"].startswith("approval_denied") and "hook crashed" in v["0"]


@pytest.mark.skipif(not EVERYTHING, reason="CODEMODE_EVERYTHING (server-everything) not set")
def test_mcp_servers_sit_beside_the_python_tools() -> None:
    node = shutil.which("node")
    assert node and EVERYTHING
    with CodeMode(tools=[add], mcp_servers={"everything": {"command": node, "args": [EVERYTHING]}}) as cm:
        assert "mcp:everything:echo" in cm.catalog()
        r = cm.exec_sync("const e = await MCP.everything.echo({ message: 'hi' }); return [e.content[0].text, await tools.add({ a: 1, b: 2 })]")
        assert r["value"] == ["Echo: hi", 3], r


def test_a_file_store_keeps_a_run_for_its_owner_only() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = f"file:{Path(tmp) / 'runs.db'}"
        with CodeMode(tools=[add], store=store, owner="test-owner") as first:
            waiting = first.exec_sync("const a = await tools.add({ a: 20, b: 1 }); await yield_control(); return a * 2")
            assert waiting["status"] == "waiting"
        with CodeMode(tools=[add], store=store, owner="someone-else") as stranger:
            assert stranger.wait_sync(waiting["runId"])["status"] == "failed"
        with CodeMode(tools=[add], store=store, owner="test-owner") as second:
            done = second.wait_sync(waiting["runId"])
            assert done["status"] == "completed" and done["value"] == 42, done


def test_async_api_runs_async_tools_on_the_callers_loop_and_refuses_sync_calls_inside_it() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def where() -> str:
        """Which loop runs an async tool."""
        loops.append(asyncio.get_running_loop())
        return "here"

    async def main() -> None:
        async with await CodeMode.open(tools=[where, add]) as cm:
            r = await cm.exec("return [await tools.where({}), await tools.add({ a: 1, b: 1 })]")
            assert r["value"] == ["here", 2], r
            assert loops == [asyncio.get_running_loop()]
            with pytest.raises(RuntimeError, match="await cm.exec"):
                cm.exec_sync("return 1")
            results = await asyncio.gather(*(cm.exec(f"return await tools.add({{ a: {i}, b: 1 }})") for i in range(8)))
            assert [x["value"] for x in results] == [i + 1 for i in range(8)]

    asyncio.run(main())


def test_the_gil_is_released_while_a_cell_runs() -> None:
    ticks = 0
    stop = False

    def count() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    counter.start()
    try:
        with CodeMode() as cm:
            before = ticks
            # Busy in the VM for 300 ms of wall time.
            r = cm.exec_sync("const end = Date.now() + 300; let x = 0; while (Date.now() < end) x++; return x > 0")
            during = ticks - before
        assert r["value"] is True, r
        # Date.now() is whole milliseconds, so the loop may end up to 1 ms
        # short of 300 ms on the monotonic clock the telemetry uses.
        assert r["telemetry"]["durationMs"] >= 295, r["telemetry"]
        assert during >= 5, f"the other thread ran {during} times while the cell ran {r['telemetry']['durationMs']} ms"
    finally:
        stop = True
        counter.join()


def test_promise_all_over_200_python_calls() -> None:
    in_flight = 0
    most = 0
    lock = threading.Lock()

    def slow_double(n: int) -> int:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        time.sleep(0.002)
        with lock:
            in_flight -= 1
        return n * 2

    with CodeMode(tools=[slow_double]) as cm:
        r = cm.exec_sync("const xs = await Promise.all(Array.from({ length: 200 }, (_, n) => tools.slow_double({ n }))); return xs.reduce((a, b) => a + b, 0);")
        assert r["value"] == 199 * 200, str(r)[:300]
        assert 1 < most <= 16, most


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))


def test_a_result_too_deep_for_json_fails_its_call_on_every_path_and_never_hangs() -> None:
    def deep() -> list[Any]:
        """Returns a list nested far deeper than JSON encoding allows."""
        value: list[Any] = []
        for _ in range(100_000):
            value = [value]
        return value

    def slow_deep() -> list[Any]:
        """The same, slowly: its second call runs on the thread pool."""
        time.sleep(0.005)
        return deep()

    with CodeMode(tools=[deep, slow_deep], config={"timeoutMs": 3000}) as cm:
        started = time.monotonic()
        r = cm.exec_sync("""
            const out = [];
            for (const name of ["deep", "slow_deep", "slow_deep"]) {
              try { await tools[name]({}); out.push("no error"); } catch (e) { out.push(e.message); }
            }
            return out;""")
        assert r["status"] == "completed", r
        assert all("not JSON" in m for m in r["value"]), r["value"]
        assert time.monotonic() - started < 2, "a call waited for an answer that never came"
