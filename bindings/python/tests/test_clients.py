"""The gateway through pip, as MCP clients start it: every Python-route
command line of the README's "Connect an MCP client" section (uvx and pip)
is started by the official Python MCP SDK's ``Client`` in its default mode,
which lists exactly ``exec`` and ``wait``; and the console script runs the
rest of the command line.

Environment (set by ``cargo xtask test-python``): CODEMODE_README, the
repository's README.md; CODEMODE_WHEEL, the built wheel (for ``uvx
--from``); CODEMODE_EVERYTHING, server-everything's entry point.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

README = os.environ.get("CODEMODE_README", "")
WHEEL = os.environ.get("CODEMODE_WHEEL", "")
EVERYTHING = os.environ.get("CODEMODE_EVERYTHING", "")
BIN_DIR = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(not (README and WHEEL and EVERYTHING), reason="run by cargo xtask test-python")


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("clients") / "gateway.json5"
    node = shutil.which("node")
    path.write_text(json.dumps({"store": "memory", "tools": {"codeMode": {"enabled": True}}, "mcpServers": {"everything": {"command": node, "args": [EVERYTHING]}}}))
    return str(path)


def documented_python_command_lines() -> list[tuple[str, str, list[str]]]:
    """(client, command, args) of every uvx/pip-route config in the README."""
    text = Path(README).read_text()
    section = text.split("<!-- client-configs:start -->")[1].split("<!-- client-configs:end -->")[0]
    found: list[tuple[str, str, list[str]]] = []
    client = ""
    for m in re.finditer(r"\*\*([^*]+)\*\*|```(json|sh|toml)\n(.*?)```", section, re.S):
        if m.group(1):
            client = m.group(1)
            continue
        kind, body = m.group(2), m.group(3)
        entries: list[tuple[str, list[str]]] = []
        if kind == "json":
            parsed = json.loads(body)
            server = (parsed.get("mcpServers") or parsed["servers"])["codemode"]
            entries.append((server["command"], server["args"]))
        elif kind == "toml":
            server = tomllib.loads(body)["mcp_servers"]["codemode"]
            entries.append((server["command"], server["args"]))
        else:
            for line in body.strip().splitlines():
                command, *args = line.split(" -- ", 1)[1].split(" ")
                entries.append((command, args))
        for command, args in entries:
            if command in ("uvx", "codemode") or command.endswith("/venv/bin/codemode"):
                found.append((client, command, args))
    return found


def localize(command: str, args: list[str], config: str) -> tuple[str, list[str]]:
    args = [a.replace("/path/to/gateway.json5", config) for a in args]
    args = [WHEEL if re.fullmatch(r"/path/to/codemode-[^ ]+\.whl", a) else a for a in args]
    if command == "uvx":
        return str(BIN_DIR / "uvx"), args
    return str(BIN_DIR / "codemode"), args


async def list_tools(command: str, args: list[str]) -> list[str]:
    env = {**os.environ, "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(Path(WHEEL).parent / "uv-cache"))}
    async with Client(StdioServerParameters(command=command, args=args, env=env)) as client:
        tools = await client.list_tools()
        return sorted(t.name for t in tools.tools)


def test_every_python_route_in_the_readme_lists_exactly_exec_and_wait(config: str) -> None:
    lines = documented_python_command_lines()
    clients = {c.split(" ")[0] for c, _, _ in lines}
    for expected in ("Claude", "Cursor", "VS", "Codex"):
        assert expected in clients, f"README documents the Python route for {expected}"
    assert any(c == "uvx" for _, c, _ in lines) and any(c != "uvx" for _, c, _ in lines)
    for client, command, args in lines:
        cmd, argv = localize(command, args, config)
        assert asyncio.run(list_tools(cmd, argv)) == ["exec", "wait"], f"{client}: {command} {' '.join(args)}"


def test_the_console_script_serves_a_real_client_that_runs_a_cell(config: str) -> None:
    async def main() -> dict[str, Any]:
        server = StdioServerParameters(command=str(BIN_DIR / "codemode"), args=["serve", "--config", config])
        async with Client(server) as client:
            r = await client.call_tool("exec", {"code": "const e = await MCP.everything.echo({ message: 'via pip' }); return e.content[0].text"})
            if r.structured_content is not None:
                return dict(r.structured_content)
            return dict(json.loads(r.content[0].text))  # type: ignore[union-attr]

    result = asyncio.run(main())
    assert result["status"] == "completed", result
    assert result["value"] == "Echo: via pip"


def test_the_console_script_runs_the_whole_command_line(config: str) -> None:
    bin = str(BIN_DIR / "codemode")
    version = subprocess.run([bin, "--version"], capture_output=True, text=True, check=True)
    assert re.match(r"codemode \d+\.\d+\.\d+", version.stdout)
    ok = subprocess.run([bin, "exec", "--store", "memory", "-"], input="return 6 * 7", capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["value"] == 42
    failed = subprocess.run([bin, "exec", "--store", "memory", "-"], input="throw new Error('x')", capture_output=True, text=True)
    assert failed.returncode == 1 and json.loads(failed.stdout)["status"] == "failed"
    check = subprocess.run([bin, "check-config", "--offline", config], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr + check.stdout
    catalog = subprocess.run([bin, "catalog", "--config", config], capture_output=True, text=True)
    assert catalog.returncode == 0 and "mcp:everything:echo" in catalog.stdout, catalog.stderr
    usage = subprocess.run([bin, "serve"], capture_output=True, text=True)
    assert usage.returncode == 2 and "--config" in usage.stderr
    module = subprocess.run([sys.executable, "-m", "codemode", "--version"], capture_output=True, text=True)
    assert module.returncode == 0 and module.stdout == version.stdout
