// A `hooks.beforeToolCall` command for the control-layer tests: reads the
// event on stdin, prints a decision on stdout.
//   mcp:annotated:blocked  -> block
//   mcp:annotated:echo     -> rewrite the input to { text: "rewritten" }
//   an exec whose code says "hang the hook" -> never answers (timeout)
//   anything else          -> allow
let input = "";
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  const { event } = JSON.parse(input);
  const say = (decision) => process.stdout.write(JSON.stringify(decision));
  if (event.toolKind === "code_mode_exec" && String(event.input.code).includes("hang the hook")) {
    setInterval(() => {}, 1000);
    return;
  }
  if (event.toolId === "mcp:annotated:blocked") {
    say({ decision: "block", reason: "blocked by the test hook" });
  } else if (event.toolId === "mcp:annotated:echo") {
    say({ decision: "rewrite", input: { text: "rewritten" } });
  } else {
    say({ decision: "allow" });
  }
});
