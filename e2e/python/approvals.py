"""End-to-end: the official Python MCP SDK's `Client` in its default mode
(`mode="auto"`: it probes `server/discover` and speaks 2026-07-28 without a
session) against `codemode serve`, over stdio and over HTTP. A destructive
upstream call needs approval; the SDK answers the question the gateway puts
in the result (`input_required`) through its elicitation callback and sends
the call again; the run goes on. A decline denies the call.

Run by crates/cli/tests/gateway_e2e.rs with CODEMODE_BIN set; exits non-zero
on the first failed check.
"""

import asyncio
import json
import os
import re
import sys
import tempfile

import mcp_types as types
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

BIN = os.environ["CODEMODE_BIN"]
HERE = os.path.dirname(os.path.abspath(__file__))
ANNOTATED = os.path.join(HERE, "..", "servers", "annotated.mjs")


def write_config() -> str:
    folder = tempfile.mkdtemp(prefix="codemode-py-")
    path = os.path.join(folder, "gateway.json")
    with open(path, "w") as f:
        json.dump(
            {
                "tools": {"codeMode": {"enabled": True, "timeoutMs": 5000}},
                "mcpServers": {"annotated": {"command": "node", "args": [ANNOTATED]}},
            },
            f,
        )
    return path


def result_of(call: types.CallToolResult) -> dict:
    if call.structured_content is not None:
        return call.structured_content
    return json.loads(call.content[0].text)


async def scenarios(server, transport: str) -> None:
    asked: list = []
    answers: list[str] = []

    async def on_elicit(_context, params):
        asked.append(params)
        answer = answers.pop(0) if answers else "deny"
        if answer == "decline":
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"decision": answer})

    async with Client(server, elicitation_callback=on_elicit) as client:
        version = client.session.protocol_version
        assert version == "2026-07-28", f"the default mode spoke {version}"
        tools = await client.list_tools()
        names = sorted(t.name for t in tools.tools)
        assert names == ["exec", "wait"], names

        answers.append("allow_once")
        result = result_of(
            await client.call_tool(
                "exec",
                {
                    "code": 'const d = await MCP.annotated.drop({ table: "t" });'
                    " return d.content[0].text;"
                },
            )
        )
        assert result["status"] == "completed", result
        assert result["value"] == "dropped t", result
        assert len(asked) == 1, asked
        assert '"drop" of MCP server "annotated"' in asked[0].message, asked[0].message
        print(f"ok {transport}: a destructive call was asked about in the result and ran")

        answers.append("decline")
        result = result_of(
            await client.call_tool(
                "exec",
                {
                    "code": 'try { await MCP.annotated.drop({ table: "u" }); return "ran"; }'
                    " catch (e) { return e.code; }"
                },
            )
        )
        assert result["status"] == "completed", result
        assert result["value"] == "approval_denied", result
        runs = result_of(
            await client.call_tool(
                "exec", {"code": "return JSON.parse((await MCP.annotated.runs({})).content[0].text);"}
            )
        )
        assert runs["value"].get("drop") == 1, runs
        print(f"ok {transport}: a declined call was denied and never ran")


async def over_http(config: str) -> None:
    gateway = await asyncio.create_subprocess_exec(
        BIN, "serve", "--config", config, "--http", "127.0.0.1:0",
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        url = None
        while url is None:
            line = await asyncio.wait_for(gateway.stderr.readline(), 30)
            if not line:
                raise RuntimeError("the gateway ended before serving")
            found = re.search(r"serving MCP at (http://\S+)", line.decode())
            if found:
                url = found.group(1)
        await scenarios(url, "http")
    finally:
        gateway.terminate()
        await gateway.wait()


async def main() -> None:
    config = write_config()
    await scenarios(StdioServerParameters(command=BIN, args=["serve", "--config", config]), "stdio")
    await over_http(config)


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
