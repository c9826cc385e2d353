// End-to-end: OpenTelemetry traces. The test runs a small OTLP/HTTP (JSON)
// receiver on loopback; the gateway exports to it (OTEL_EXPORTER_OTLP_*).
// The official TypeScript client sends a W3C `traceparent`; the spans must
// continue that trace: request span → exec span → one span per nested call
// (tool id, outcome), and carry no code or inputs. A nested call to an
// HTTP upstream carries the trace on: `traceparent` as an HTTP header and
// in `_meta` (SEP-414), naming the nested call's span as parent.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectHttp, exec, servers, startHttpGateway, startListening } from "./harness.mjs";

const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN = "00f067aa0ba902b7";

describe("OpenTelemetry traces", () => {
  let receiver, gateway, client, traced;
  const spans = [];

  before(async () => {
    receiver = createServer((req, res) => {
      let body = "";
      req.on("data", (c) => { body += c; });
      req.on("end", () => {
        if (req.url === "/v1/traces") {
          for (const rs of JSON.parse(body).resourceSpans ?? []) {
            for (const ss of rs.scopeSpans ?? []) spans.push(...(ss.spans ?? []));
          }
        }
        res.setHeader("content-type", "application/json");
        res.end("{}");
      });
    });
    await new Promise((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    let tracedUrl;
    ({ child: traced, url: tracedUrl } = await startListening("traced.mjs"));
    const dir = mkdtempSync(join(tmpdir(), "codemode-traces-"));
    const config = join(dir, "gateway.json");
    writeFileSync(config, JSON.stringify({
      tools: { codeMode: { enabled: true, timeoutMs: 5000 } },
      mcpServers: {
        annotated: { command: process.execPath, args: [servers.annotated] },
        traced: { url: tracedUrl },
      },
    }));
    gateway = await startHttpGateway(config, {
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${receiver.address().port}`,
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      },
    });
    client = await connectHttp(gateway.url, {
      headers: { traceparent: `00-${TRACE_ID}-${PARENT_SPAN}-01` },
    });
  });

  after(async () => {
    await client?.close();
    await gateway?.stop();
    receiver?.close();
    traced?.kill();
  });

  test("an exec continues the client's trace, with a child span per nested call", async () => {
    const r = await exec(client.client, `
      const secret = "do-not-export-" + "this";
      await MCP.annotated.peek({});
      await MCP.annotated.echo({ text: secret });
      return JSON.parse((await MCP.traced.seen({})).content[0].text);`);
    assert.equal(r.status, "completed", JSON.stringify(r));
    await client.close();
    client = undefined;
    // Stopping the gateway flushes the spans still batched.
    await gateway.stop();
    gateway = undefined;

    const attr = (span, key) => span.attributes?.find((a) => a.key === key)?.value?.stringValue;
    const named = (name) => spans.filter((s) => s.name === name);
    const [request] = named("mcp.tools_call").filter((s) => attr(s, "tool") === "exec");
    assert.ok(request, `a request span: ${JSON.stringify(spans.map((s) => s.name))}`);
    assert.equal(request.traceId, TRACE_ID, "the client's trace continues");
    assert.equal(request.parentSpanId, PARENT_SPAN);
    const [execSpan] = named("code_mode.exec");
    assert.ok(execSpan);
    assert.equal(execSpan.parentSpanId, request.spanId);
    assert.equal(attr(execSpan, "status"), "completed");
    const nested = named("code_mode.nested_call");
    assert.deepEqual(nested.map((s) => attr(s, "tool_id")).sort(), ["mcp:annotated:echo", "mcp:annotated:peek", "mcp:traced:seen"]);
    for (const span of nested) {
      assert.equal(span.traceId, TRACE_ID);
      assert.equal(span.parentSpanId, execSpan.spanId, "nested calls are children of the exec");
      assert.equal(attr(span, "outcome"), "ok");
    }
    assert.doesNotMatch(JSON.stringify(spans), /do-not-export/, "no code or inputs in spans");
    // The HTTP upstream got the trace, its parent the nested call's span.
    const seenSpan = nested.find((s) => attr(s, "tool_id") === "mcp:traced:seen");
    assert.equal(r.value.header, `00-${TRACE_ID}-${seenSpan.spanId}-01`, JSON.stringify(r.value));
    assert.equal(r.value.meta, r.value.header, "the same context in _meta");
  });
});
