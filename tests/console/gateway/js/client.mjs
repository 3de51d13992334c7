// The TypeScript SDK's client (npm @modelcontextprotocol/sdk) driving one tools/call through the gateway.
// Usage: node client.mjs '<scenario JSON>'; prints one JSON line: {"tools": [...], "result": {...}, "asked": [...]}.
// Scenario: {command, args, env, cwd, tool?, arguments?, answers?, action?, elicitation?: {form?, url?} | null}.
// The simulated user fills a form with `answers`, then each field's default, and ticks confirmations.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const scenario = JSON.parse(process.argv[2]);
const elicitation = scenario.elicitation === undefined ? { form: {}, url: {} } : scenario.elicitation;
const capabilities = elicitation === null ? {} : { elicitation };
const client = new Client({ name: "preflight-ts-test", version: "0.0.0" }, { capabilities });
const asked = [];

if (elicitation !== null) {
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    const params = request.params;
    asked.push(params);
    const action = scenario.action || "accept";
    if (action !== "accept") return { action };
    if (params.mode === "url") {
      // The user opens the page; with `wait_for`, accept only once that file exists (the test approves first).
      process.stderr.write(`URL ${params.url}\n`);
      if (scenario.asked_file) {
        const { writeFileSync } = await import("node:fs");
        writeFileSync(scenario.asked_file, params.url);
      }
      if (scenario.wait_for) {
        const { existsSync } = await import("node:fs");
        const deadline = Date.now() + 60000;
        while (!existsSync(scenario.wait_for) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      }
      return { action: "accept" };
    }
    const content = {};
    for (const [key, prop] of Object.entries(params.requestedSchema.properties)) {
      if (scenario.answers && key in scenario.answers) content[key] = scenario.answers[key];
      else if (prop.type === "boolean") content[key] = true;
      else if (key === "fixed:action_name") content[key] = "save my note";
      else if (key === "fixed:timing") content[key] = "immediate";
      else if ("default" in prop) content[key] = prop.default;
    }
    return { action: "accept", content };
  });
}

const transport = new StdioClientTransport({
  command: scenario.command,
  args: scenario.args,
  env: scenario.env,
  cwd: scenario.cwd,
  stderr: "inherit",
});
await client.connect(transport);
const out = { protocolVersion: transport._protocolVersion ?? null, asked };
out.tools = (await client.listTools()).tools;
if (scenario.tool) {
  out.result = await client.callTool({ name: scenario.tool, arguments: scenario.arguments || {} }, undefined, {
    timeout: 120000,
  });
}
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
