"""pydantic-ai: code mode's ``exec`` and ``wait`` as tools of an Agent.

    from pydantic_ai import Agent
    from codemode import CodeMode
    from codemode.pydantic_ai import code_mode_tools

    cm = CodeMode(tools=[...])
    agent = Agent(model, tools=code_mode_tools(cm))
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import Tool

from . import CodeMode


def code_mode_tools(code_mode: CodeMode) -> list[Tool[Any]]:
    """``[exec, wait]`` with their exact descriptions and JSON schemas; the
    model's arguments reach the runtime as they are, and the model gets the
    result union back (a dict)."""
    tools: list[Tool[Any]] = []
    for definition in code_mode.surface():
        tools.append(
            Tool.from_schema(
                _tool_function(code_mode, definition["name"]),
                name=definition["name"],
                description=definition["description"],
                json_schema=definition["inputSchema"],
            )
        )
    return tools


def _tool_function(code_mode: CodeMode, name: str) -> Any:
    async def tool(**arguments: Any) -> dict[str, Any]:
        return await code_mode.run_tool(name, arguments)

    tool.__name__ = name
    return tool
