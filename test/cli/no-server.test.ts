// A CLI started without SBX_SERVER on the local platform says what is missing (exit 2, naming
// the variable and the fix), instead of reporting a failed login.
import { spawnSync } from "node:child_process";
import { resolve } from "node:path";
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { runCli } from "../../runtime/cli/main.ts";

const repo = resolve(import.meta.dirname, "../..");
const MESSAGE = "SBX_SERVER is not set: export SBX_SERVER=http://host:port";

/** The environment of a shell that never exported SBX_SERVER (nor a config). */
function envWithoutServer(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of ["SBX_SERVER", "SBX_TOKEN", "SBX_CONFIG"]) delete env[k];
  return env;
}

function sink() {
  let text = "";
  const stream = new Writable({
    write: (c, _e, cb) => {
      text += c.toString();
      cb();
    },
  });
  return { stream, text: () => text };
}

describe("sbx without SBX_SERVER", () => {
  it("exits 2 and names SBX_SERVER and how to set it", async () => {
    const out = sink();
    const err = sink();
    const code = await runCli(["ls"], {
      env: envWithoutServer(),
      io: { stdout: out.stream, stderr: err.stream, stdin: process.stdin },
    });
    expect(code).toBe(2);
    expect(err.text()).toContain(`sbx: ${MESSAGE}`);
    expect(err.text()).toContain("npm start");
    expect(err.text()).not.toMatch(/unauthenticated|token is/i);
  });

  it("--json: error code validation with the variable as the field", async () => {
    const err = sink();
    const code = await runCli(["ls", "--json"], {
      env: envWithoutServer(),
      io: { stdout: sink().stream, stderr: err.stream, stdin: process.stdin },
    });
    expect(code).toBe(2);
    expect(JSON.parse(err.text())).toMatchObject({ error: { code: "validation", details: { field: "SBX_SERVER" } } });
    expect(JSON.parse(err.text()).error.message).toContain(MESSAGE);
  });

  it("a real CLI process exits 2 with the message", () => {
    const r = spawnSync(process.execPath, ["--import", "tsx", "runtime/cli/main.ts", "ls"], {
      cwd: repo,
      env: envWithoutServer(),
      encoding: "utf8",
      timeout: 60_000,
    });
    expect(r.stderr).toContain(MESSAGE);
    expect(r.status).toBe(2);
  });
});
