"""End-to-end: an upstream built with the official Python SDK (`MCPServer`,
`eliciting_server.py`) whose tool asks its user mid-call (`ctx.elicit`),
behind `codemode serve`. The gateway connects to it as the official
clients do by default (a session), so the server can send its
`elicitation/create`; the gateway relays it to the client whose run made
the call (the official Python SDK client with a session, `mode="legacy"`),
and the answer reaches the tool. A declined question reaches it too.

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


async def main() -> None:
    asked: list = []
    answers: list = [{"proceed": True}, None]

    async def on_elicit(_context, params):
        asked.append(params)
        answer = answers.pop(0)
        if answer is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content=answer)

    gateway = StdioServerParameters(command=BIN, args=["serve", "--config", write_config()])
    async with Client(gateway, mode="legacy", elicitation_callback=on_elicit) as client:
        code = 'return (await MCP.eliciting.confirm({ action: "deploy" })).content[0].text;'
        result = result_of(await client.call_tool("exec", {"code": code}))
        assert result["status"] == "completed", result
        assert result["value"] == "deploy: proceed=True", result
        assert len(asked) == 1 and "Proceed with deploy?" in asked[0].message, asked
        print("ok: the upstream's question reached the client and its answer the tool")

        result = result_of(await client.call_tool("exec", {"code": code}))
        assert result["status"] == "completed", result
        assert result["value"] == "deploy: decline", result
        print("ok: a declined question reached the tool as declined")


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
