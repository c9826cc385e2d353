"""An upstream MCP server built with the official Python SDK (`MCPServer`,
stdio) whose tool asks its user mid-call (`ctx.elicit`), for the gateway's
end-to-end tests: `confirm(action)` returns what the user answered."""

from pydantic import BaseModel

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("eliciting")


class Confirm(BaseModel):
    proceed: bool


@server.tool(annotations={"readOnlyHint": True})
async def confirm(action: str, ctx: Context) -> str:
    """Asks the user whether to go on with `action`."""
    answer = await ctx.elicit(f"Proceed with {action}?", Confirm)
    if answer.action == "accept" and answer.data is not None:
        return f"{action}: proceed={answer.data.proceed}"
    return f"{action}: {answer.action}"


if __name__ == "__main__":
    server.run()
