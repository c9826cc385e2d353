"""The OpenAI Agents SDK for Python: code mode's ``exec`` and ``wait`` as
function tools of an Agent.

    from agents import Agent
    from codemode import CodeMode
    from codemode.openai_agents import code_mode_tools

    cm = CodeMode(tools=[...])
    agent = Agent(name="worker", instructions=..., tools=code_mode_tools(cm))
"""

from __future__ import annotations

import json
from typing import Any

from agents import FunctionTool
from agents.tool_context import ToolContext

from . import CodeMode


def code_mode_tools(code_mode: CodeMode) -> list[FunctionTool]:
    """``[exec, wait]`` as function tools; each returns the result union as
    JSON text. Not strict: ``exec``'s optional ``language`` is not a
    strict-mode schema."""
    tools: list[FunctionTool] = []
    for definition in code_mode.surface():
        name = definition["name"]

        async def invoke(context: ToolContext[Any], arguments: str, name: str = name) -> str:
            args = json.loads(arguments) if arguments else {}
            call_id = getattr(context, "tool_call_id", None)
            return json.dumps(await code_mode.run_tool(name, args, call_id=call_id))

        tools.append(
            FunctionTool(
                name=name,
                description=definition["description"],
                params_json_schema=definition["inputSchema"],
                on_invoke_tool=invoke,
                strict_json_schema=False,
            )
        )
    return tools
