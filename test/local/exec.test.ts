// Exec semantics of the local backend: streaming, exact exit codes and timeouts, stdin, env, cwd.
import { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createReady, run, startBackend, type Harness } from "./harness.ts";

let h: Harness;
let id: string;

beforeAll(async () => {
  h = await startBackend();
  id = await createReady(h, { env: { FROM_SPEC: "spec-value" } });
});
afterAll(async () => {
  await h?.backend.close();
});

describe("local exec", () => {
  it("streams output while the command runs", async () => {
    const t0 = Date.now();
    const s = await h.backend.exec(id, { command: ["sh", "-c", "echo first; sleep 1; echo second >&2; sleep 1; echo third"] });
    const seen: { text: string; at: number }[] = [];
    s.stdout.on("data", (d) => seen.push({ text: String(d), at: Date.now() - t0 }));
    s.stderr.on("data", (d) => seen.push({ text: String(d), at: Date.now() - t0 }));
    const result = await s.result;
    const doneAt = Date.now() - t0;
    expect(seen.map((c) => c.text).join("")).toBe("first\nsecond\nthird\n");
    expect(seen[0].at).toBeLessThan(500);
    expect(doneAt - seen[0].at).toBeGreaterThan(1500);
    expect(seen.find((c) => c.text.includes("second"))!.at).toBeGreaterThan(900);
    expect(result).toMatchObject({ exitCode: 0, timedOut: false, oomKilled: false });
  });

  it.each([0, 1, 2, 42, 127, 255])("reports exit code %i exactly", async (code) => {
    expect((await run(h.backend, id, `exit ${code}`)).exitCode).toBe(code);
  });

  it("reports death by signal as 128 + signal", async () => {
    expect((await run(h.backend, id, "kill -TERM $$")).exitCode).toBe(143);
    expect((await run(h.backend, id, "kill -KILL $$")).exitCode).toBe(137);
  });

  it("reports a command that does not exist as 127 with a message", async () => {
    const r = await run(h.backend, id, ["definitely-not-a-command"]);
    expect(r).toMatchObject({ exitCode: 127, timedOut: false });
    expect(r.stderr).toContain("definitely-not-a-command: command not found");
  });

  it("times out exactly: exit 124, timedOut, and every process of the command is gone", async () => {
    const r = await run(h.backend, id, "sleep 300 & sleep 301 & (sleep 302 &) ; echo started; wait", { timeoutMs: 700 });
    expect(r).toMatchObject({ exitCode: 124, timedOut: true, stdout: "started\n" });
    expect(r.durationMs).toBeGreaterThanOrEqual(700);
    expect(r.durationMs).toBeLessThan(1500);
    const ps = await run(h.backend, id, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '");
    expect(ps.stdout).not.toMatch(/sleep 30[012]/);
  });

  it("kill() ends the whole command", async () => {
    const s = await h.backend.exec(id, { command: ["sh", "-c", "sleep 200 & sleep 201; echo never"] });
    setTimeout(() => s.kill(), 200);
    const result = await s.result;
    expect(result.exitCode).toBe(137);
    expect(result.timedOut).toBe(false);
    const ps = await run(h.backend, id, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '");
    expect(ps.stdout).not.toMatch(/sleep 20[01]/);
  });

  it("passes stdin bytes and streams, then closes stdin", async () => {
    expect((await run(h.backend, id, ["cat"], { stdin: Buffer.from("hello\nworld\n") })).stdout).toBe("hello\nworld\n");
    const big = Buffer.alloc(3 * 1024 * 1024, "x");
    const r = await run(h.backend, id, ["wc", "-c"], { stdin: Readable.from([big.subarray(0, 1_000_000), big.subarray(1_000_000)]) });
    expect(r.stdout.trim()).toBe(String(big.length));
    expect((await run(h.backend, id, ["cat"])).stdout).toBe("");
  });

  it("relays large output intact", async () => {
    const r = await run(h.backend, id, "head -c 5000000 /dev/zero | tr '\\0' 'y'");
    expect(r.stdout.length).toBe(5_000_000);
    expect(r.exitCode).toBe(0);
  });

  it("applies env (base, sandbox, request) and cwd", async () => {
    const r = await run(h.backend, id, 'echo "$HOME|$FROM_SPEC|$FROM_REQ|$(pwd)"', { env: { FROM_REQ: "req" } });
    expect(r.stdout).toBe("/workspace|spec-value|req|/workspace\n");
    expect((await run(h.backend, id, "pwd", { cwd: "/tmp" })).stdout).toBe("/tmp\n");
    await expect(h.backend.exec(id, { command: ["pwd"], cwd: "/no/such/dir" })).rejects.toThrow(/cwd: invalid value "\/no\/such\/dir"/);
    await expect(h.backend.exec(id, { command: [] })).rejects.toThrow(/command: invalid value/);
  });

  it("runs commands concurrently", async () => {
    const t0 = Date.now();
    const rs = await Promise.all(Array.from({ length: 8 }, (_, i) => run(h.backend, id, `sleep 0.5; echo ${i}`)));
    expect(rs.map((r) => r.stdout.trim())).toEqual(["0", "1", "2", "3", "4", "5", "6", "7"]);
    expect(Date.now() - t0).toBeLessThan(3000);
  });
});

describe("local exec input that outlives the command", () => {
  it("finishes when the command exits without reading its stdin stream, and drains the stream", async () => {
    const big = Readable.from((function* () {
      for (let i = 0; i < 200; i++) yield Buffer.alloc(64 * 1024, "z");
    })());
    const r = await run(h.backend, id, ["sh", "-c", "echo done"], { stdin: big });
    expect(r).toMatchObject({ stdout: "done\n", exitCode: 0 });
    await new Promise((res) => setTimeout(res, 100));
    expect(big.readableEnded || big.destroyed || big.readableFlowing).toBeTruthy();
  });
});
