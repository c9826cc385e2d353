"""The framework adapters, driven by each framework's own agent loop with a
scripted model (no network): the model calls ``exec`` with a cell that calls
two of the user's Python tools and yields, then ``wait`` with the runId it
reads from that result, then answers with the run's value."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from codemode import CodeMode

CELL = """
const a = await tools.add({ a: 19, b: 2 });
await yield_control();
return await tools.multiply({ a, b: 2 });"""


def user_tools(calls: list[str]) -> list[Any]:
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        calls.append("add")
        return a + b

    async def multiply(a: int, b: int) -> int:
        """Multiply two numbers."""
        calls.append("multiply")
        return a * b

    return [add, multiply]


def run_id_in(text: str) -> str:
    m = re.search(r"run_[0-9a-f]{32}", text)
    assert m, f"no runId in what the model saw: {text[:400]}"
    return m.group(0)


def value_in(text: str) -> int:
    m = re.search(r"\\?[\"']value\\?[\"']: ?(\d+)", text)
    assert m, f"no value in what the model saw: {text[:400]}"
    return int(m.group(1))


def test_pydantic_ai_agent_runs_exec_then_wait_and_ends_with_the_value() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from codemode.pydantic_ai import code_mode_tools

    calls: list[str] = []
    steps: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        steps.append(len(steps) + 1)
        seen = str(messages)
        if len(steps) == 1:
            assert sorted(t.name for t in info.function_tools) == ["exec", "wait"]
            return ModelResponse(parts=[ToolCallPart("exec", {"code": CELL}, tool_call_id="call_exec")])
        if len(steps) == 2:
            return ModelResponse(parts=[ToolCallPart("wait", {"runId": run_id_in(seen)}, tool_call_id="call_wait")])
        return ModelResponse(parts=[TextPart(f"The answer is {value_in(seen)}.")])

    async def main() -> None:
        async with await CodeMode.open(tools=user_tools(calls)) as cm:
            agent = Agent(FunctionModel(model), tools=code_mode_tools(cm))
            result = await agent.run("Add 19 and 2, then double it.")
            assert result.output == "The answer is 42."

    asyncio.run(main())
    assert len(steps) == 3
    assert calls == ["add", "multiply"]


def test_openai_agents_runner_runs_exec_then_wait_and_ends_with_the_value() -> None:
    from agents import Agent, ModelSettings, Runner, RunConfig
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    from codemode.openai_agents import code_mode_tools

    calls: list[str] = []
    steps: list[int] = []

    def call(call_id: str, name: str, arguments: dict[str, Any]) -> ModelResponse:
        item = ResponseFunctionToolCall(type="function_call", call_id=call_id, name=name, arguments=json.dumps(arguments), id=f"fc_{call_id}", status="completed")
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    class Scripted(Model):
        async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any, output_schema: Any, handoffs: Any, tracing: Any, **kwargs: Any) -> ModelResponse:
            steps.append(len(steps) + 1)
            seen = json.dumps(input, default=str)
            if len(steps) == 1:
                assert sorted(t.name for t in tools) == ["exec", "wait"]
                return call("call_exec", "exec", {"code": CELL})
            if len(steps) == 2:
                return call("call_wait", "wait", {"runId": run_id_in(seen)})
            text = ResponseOutputText(type="output_text", text=f"The answer is {value_in(seen)}.", annotations=[])
            message = ResponseOutputMessage(type="message", id="msg_1", role="assistant", status="completed", content=[text])
            return ModelResponse(output=[message], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    async def main() -> None:
        async with await CodeMode.open(tools=user_tools(calls)) as cm:
            agent = Agent(name="worker", instructions="Use exec.", model=Scripted(), tools=code_mode_tools(cm), model_settings=ModelSettings())
            result = await Runner.run(agent, "Add 19 and 2, then double it.", run_config=RunConfig(tracing_disabled=True))
            assert result.final_output == "The answer is 42."

    asyncio.run(main())
    assert len(steps) == 3
    assert calls == ["add", "multiply"]
