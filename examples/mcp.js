// Try with: codemode exec --config examples/gateway.json5 examples/mcp.js
const files = await API.list("mcp");
await MCP.memory.createEntities({
  entities: [{ name: "codemode", entityType: "project", observations: ["serves exec and wait"] }],
});
const sums = await Promise.all([1, 2, 3].map((a) => MCP.everything.getSum({ a, b: 10 })));
const graph = await MCP.memory.readGraph();
return {
  declarationFiles: files.map((f) => f.path),
  sums: sums.map((r) => r.content[0].text),
  entities: graph.structuredContent?.entities?.length ?? JSON.parse(graph.content[0].text).entities.length,
};
