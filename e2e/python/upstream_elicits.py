"""End-to-end: an upstream built with the official Python SDK (`MCPServer`,
`eliciting_server.py`) whose tool asks its user mid-call (`ctx.elicit`),
behind `codemode serve`. The gateway connects to it as the official
clients do by default (a session), so the server can send its
`elicitation/create`; the gateway relays it to the client whose run made
the call, and the answer reaches the tool. A declined question reaches it
too. Both with the official Python SDK client holding a session
(`mode="legacy"`) and in its default mode (2026-07-28, no session: the
question rides in the exec's result as `input_required`, and the SDK sends
the answer with the call again).

Run by crates/cli/tests/gateway_e2e.rs with CODEMODE_BIN set; exits non-zero
on the first failed check.
"""

import asyncio
import json
import os
import sys
import tempfile

import mcp_types as types
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

BIN = os.environ["CODEMODE_BIN"]
HERE = os.path.dirname(os.path.abspath(__file__))


def write_config() -> str:
    folder = tempfile.mkdtemp(prefix="codemode-py-")
    path = os.path.join(folder, "gateway.json")
    server = {"command": sys.executable, "args": [os.path.join(HERE, "eliciting_server.py")]}
    with open(path, "w") as f:
        json.dump(
            {
                "tools": {"codeMode": {"enabled": True, "timeoutMs": 10000}},
                "mcpServers": {"eliciting": server},
            },
            f,
        )
    return path


def result_of(call: types.CallToolResult) -> dict:
    if call.structured_content is not None:
        return call.structured_content
    return json.loads(call.content[0].text)


async def scenarios(mode: str) -> None:
    asked: list = []
    answers: list = [{"proceed": True}, None]

    async def on_elicit(_context, params):
        asked.append(params)
        answer = answers.pop(0)
        if answer is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content=answer)

    gateway = StdioServerParameters(command=BIN, args=["serve", "--config", write_config()])
    async with Client(gateway, mode=mode, elicitation_callback=on_elicit) as client:
        expected = "2025-11-25" if mode == "legacy" else "2026-07-28"
        assert client.session.protocol_version == expected, client.session.protocol_version
        code = 'return (await MCP.eliciting.confirm({ action: "deploy" })).content[0].text;'
        result = result_of(await client.call_tool("exec", {"code": code}))
        assert result["status"] == "completed", result
        assert result["value"] == "deploy: proceed=True", result
        assert len(asked) == 1 and "Proceed with deploy?" in asked[0].message, asked
        print(f"ok {mode}: the upstream's question reached the client and its answer the tool")

        result = result_of(await client.call_tool("exec", {"code": code}))
        assert result["status"] == "completed", result
        assert result["value"] == "deploy: decline", result
        print(f"ok {mode}: a declined question reached the tool as declined")


async def main() -> None:
    await scenarios("legacy")
    await scenarios("auto")


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
