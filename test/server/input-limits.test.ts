// Exec and create input that used to reach the sandbox and fail there (500/502), now refused
// up front with a 400 naming the field and the limit, and the limits proven real: the largest
// argv we accept actually runs in a sandbox. Plus: a create with a NUL in env is refused, so the
// sandbox is never poisoned, and the audit log keeps a bounded record of a huge argv.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AUDIT_BOUNDS } from "../../runtime/core/audit.ts";
import { EXEC_LIMITS } from "../../runtime/core/execInput.ts";
import { auth, createReadySandbox, type LocalRuntime, parseExecFrames, startLocalRuntime } from "../support/local.ts";

let rt: LocalRuntime;
let id: string;
const work = mkdtempSync(join(tmpdir(), "sbx-limits-"));
const auditPath = () => join(work, "audit.jsonl");

beforeAll(async () => {
  rt = await startLocalRuntime({ budget: { cpu: "200m", memory: "4Gi" }, audit: { path: auditPath() } });
  id = await createReadySandbox(rt);
}, 120_000);

afterAll(async () => {
  await rt?.close();
  rmSync(work, { recursive: true, force: true });
});

async function until<T>(get: () => T | undefined, timeoutMs = 30_000): Promise<T> {
  for (const end = Date.now() + timeoutMs; ; await new Promise((r) => setTimeout(r, 20))) {
    const v = get();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`not seen within ${timeoutMs} ms`);
  }
}

const exec = (payload: unknown) =>
  rt.app.inject({
    method: "POST",
    url: `/v1/sandboxes/${id}/exec`,
    headers: auth("alice"),
    payload: payload as Record<string, unknown>,
  });

describe("exec input the kernel would refuse", () => {
  it.each([
    { name: "NUL in argv", body: { command: ["echo", "a\u0000b"] }, field: "command.1", says: "NUL" },
    {
      name: "NUL in an env key",
      body: { command: ["true"], env: { "A\u0000B": "x" } },
      field: "env.A\u0000B",
      says: "environment variable names",
    },
    { name: "NUL in an env value", body: { command: ["true"], env: { A: "x\u0000y" } }, field: "env.A", says: "NUL" },
    { name: "NUL in cwd", body: { command: ["true"], cwd: "/tmp\u0000x" }, field: "cwd", says: "without NUL" },
    {
      name: "one argument over MAX_ARG_STRLEN",
      body: { command: ["echo", "é".repeat(70_000)] },
      field: "command.1",
      says: "MAX_ARG_STRLEN",
    },
    {
      name: "argv over the total bound",
      body: { command: ["echo", "a".repeat(100_000), "b".repeat(100_000)] },
      field: "command",
      says: `at most ${EXEC_LIMITS.totalBytes} bytes`,
    },
    {
      name: "argv + env over the total bound",
      body: { command: ["true"], env: { A: "a".repeat(100_000), B: "b".repeat(100_000) } },
      field: "command",
      says: `at most ${EXEC_LIMITS.totalBytes} bytes`,
    },
  ])("$name: 400 naming the field and the limit", async ({ body, field, says }) => {
    const res = await exec(body);
    expect(res.statusCode, res.body).toBe(400);
    const err = res.json().error;
    expect(err.code).toBe("validation");
    expect(err.message).toContain(field);
    expect(err.message).toContain(says);
    expect(res.body.length).toBeLessThan(4096);
  });

  it("accepts, and the sandbox runs, the largest argv within the limits", async () => {
    // one string of exactly the per-string maximum, and the rest of the total bound in a second
    const first = "a".repeat(EXEC_LIMITS.argStringBytes);
    const rest =
      EXEC_LIMITS.totalBytes -
      ["sh", "-c", 'printf "%s %s" "${#0}" "${#1}"'].reduce((n, a) => n + Buffer.byteLength(a) + 1, 0) -
      (first.length + 1) -
      1;
    const second = "b".repeat(rest);
    const res = await exec({ command: ["sh", "-c", 'printf "%s %s" "${#0}" "${#1}"', first, second] });
    expect(res.statusCode).toBe(200);
    expect(parseExecFrames(res.body)).toMatchObject({
      stdout: `${first.length} ${second.length}`,
      exit: { exitCode: 0 },
    });
    // one byte more is refused, naming the bound
    const over = await exec({ command: ["sh", "-c", 'printf "%s %s" "${#0}" "${#1}"', first, `${second}b`] });
    expect(over.statusCode).toBe(400);
    expect(over.json().error.message).toContain(`at most ${EXEC_LIMITS.totalBytes} bytes`);
  });

  it("a 128 KiB argument (what used to be E2BIG, 'write EPIPE') is a 400, and the sandbox goes on", async () => {
    const res = await exec({ command: ["echo", "x".repeat(128 * 1024)] });
    expect(res.statusCode).toBe(400);
    expect(res.json().error.details.field).toBe("body.command.1");
    expect(parseExecFrames((await exec({ command: ["echo", "fine"] })).body)).toMatchObject({
      stdout: "fine\n",
      exit: { exitCode: 0 },
    });
  });
});

describe("create input that would poison the sandbox", () => {
  it.each([
    { name: "a NUL in an env value", body: { env: { A: "x\u0000y" } }, field: "env.A" },
    { name: "'=' in an env key", body: { env: { "A=B": "x" } }, field: "env.A=B" },
    { name: "an empty env key", body: { env: { "": "x" } }, field: "env" },
    { name: "a NUL in a metadata value", body: { metadata: { note: "x\u0000y" } }, field: "metadata.note" },
  ])("$name is refused with 400 and nothing is created", async ({ body, field }) => {
    const before = (await rt.app.inject({ method: "GET", url: "/v1/sandboxes", headers: auth("alice") })).json()
      .sandboxes.length;
    const res = await rt.app.inject({ method: "POST", url: "/v1/sandboxes", headers: auth("alice"), payload: body });
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json().error.message).toContain(field);
    expect(
      (await rt.app.inject({ method: "GET", url: "/v1/sandboxes", headers: auth("alice") })).json().sandboxes.length,
    ).toBe(before);
  });

  it("the Manager refuses it too when called directly (the CLI's direct mode, other front ends)", async () => {
    await expect(
      rt.manager.create({ owner: "alice", profile: "base", size: "nano", env: { A: "x\u0000y" } }),
    ).rejects.toMatchObject({ code: "validation", details: { field: "env.A" } });
    await expect(
      rt.manager.create({ owner: "alice", profile: "base", size: "nano", metadata: { note: "x\u0000" } }),
    ).rejects.toMatchObject({ code: "validation", details: { field: "metadata.note" } });
  });
});

describe("audit log", () => {
  it("records a bounded argv: long strings and lists cut with a marker and the original size", async () => {
    const big = "z".repeat(100_000);
    const many = Array.from({ length: 200 }, (_, i) => `arg${i}`);
    const res = await exec({ command: ["true", big, ...many] });
    expect(parseExecFrames(res.body).exit).toMatchObject({ exitCode: 0 });
    // the audit file is written through a buffered stream: wait for the line
    const line = await until(() =>
      readFileSync(auditPath(), "utf8")
        .split("\n")
        .find((l) => l.includes('"op":"exec"') && l.includes('"true","zzz')),
    );
    expect(line.length).toBeLessThan(AUDIT_BOUNDS.detailsChars + 1024);
    const command = JSON.parse(line).details.command as string[];
    expect(command[0]).toBe("true");
    expect(command[1]).toBe(`${"z".repeat(AUDIT_BOUNDS.stringChars)}...[truncated: 100000 characters in all]`);
    expect(command).toHaveLength(AUDIT_BOUNDS.listItems + 1);
    expect(command.at(-1)).toBe(`...[truncated: 202 items in all]`);
  });
});
