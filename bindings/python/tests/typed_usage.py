"""Checked by ``mypy --strict`` in the test venv (cargo xtask test-python):
the package's types describe the API as the tests use it, and misuse is a
type error (each ``type: ignore[...]`` must be needed: warn_unused_ignores)."""

from __future__ import annotations

import asyncio
from typing import Any

from codemode import CodeMode, Result, tool
from codemode.openai_agents import code_mode_tools as agent_tools
from codemode.pydantic_ai import code_mode_tools as pydantic_tools


@tool(name="add", needs_approval=False)
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def approve(request: dict[str, Any]) -> bool:
    return bool(request["toolId"].startswith("client:"))


async def main() -> int:
    async with await CodeMode.open(tools=[add], config={"timeoutMs": 5000}, store="memory", approve=approve) as cm:
        names: list[str] = [t["name"] for t in cm.surface()]
        result: Result = await cm.exec("return 1", "typescript", call_id="c1")
        if result["status"] == "waiting":
            result = await cm.wait(str(result["runId"]))
        pending: list[dict[str, Any]] = cm.pending_approvals()
        ids: list[str] = cm.catalog()
        tools_a = pydantic_tools(cm)
        tools_b = agent_tools(cm)
        cm.exec_sync(123)  # type: ignore[arg-type]
        cm.exec_sync("1", "python")  # type: ignore[arg-type]
        return len(names) + len(pending) + len(ids) + len(tools_a) + len(tools_b)


if __name__ == "__main__":
    print(asyncio.run(main()))
