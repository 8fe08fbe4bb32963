// Exec semantics of the local backend: streaming, exact exit codes and timeouts, stdin, env, cwd.
import { Readable } from "node:stream";
import { finished } from "node:stream/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createReady, type Harness, run, startBackend } from "./harness.ts";

async function until(ok: () => boolean, timeoutMs: number): Promise<void> {
  for (const end = Date.now() + timeoutMs; !ok(); await new Promise((r) => setTimeout(r, 20))) {
    if (Date.now() > end) throw new Error(`condition not met within ${timeoutMs} ms`);
  }
}

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
    // Each line waits for a gate file that the test creates only after it received the line
    // before: the command cannot finish unless its output reached us while it ran. No clock.
    const gate = `/tmp/gate-${process.pid}-${Date.now()}`;
    const wait = (n: number) => `until [ -e ${gate}.${n} ]; do sleep 0.02; done`;
    const s = await h.backend.exec(id, {
      command: ["sh", "-c", `echo first; ${wait(1)}; echo second >&2; ${wait(2)}; echo third`],
      timeoutMs: 30_000,
    });
    const seen: string[] = [];
    const opened: Promise<unknown>[] = [];
    const onData = (d: Buffer) => {
      seen.push(String(d));
      const n = seen.join("").includes("second") ? 2 : 1;
      opened.push(run(h.backend, id, ["touch", `${gate}.${n}`]));
    };
    s.stdout.on("data", onData);
    s.stderr.on("data", onData);
    const [result] = await Promise.all([s.result, finished(s.stdout), finished(s.stderr)]);
    await Promise.all(opened);
    expect(seen.join("")).toBe("first\nsecond\nthird\n");
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
    const r = await run(h.backend, id, "sleep 300 & sleep 301 & (sleep 302 &) ; echo started; wait", {
      timeoutMs: 700,
    });
    expect(r).toMatchObject({ exitCode: 124, timedOut: true, stdout: "started\n" });
    expect(r.durationMs).toBeGreaterThanOrEqual(700);
    // ended by the timeout, not by `sleep 300`: the bound is generous for a busy 2-core machine
    expect(r.durationMs).toBeLessThan(30_000);
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
    const r = await run(h.backend, id, ["wc", "-c"], {
      stdin: Readable.from([big.subarray(0, 1_000_000), big.subarray(1_000_000)]),
    });
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
    await expect(h.backend.exec(id, { command: ["pwd"], cwd: "/no/such/dir" })).rejects.toThrow(
      /cwd: invalid value "\/no\/such\/dir"/,
    );
  });

  it("runs commands concurrently", async () => {
    // a barrier: each command waits until all 8 have started, so run one at a time they would
    // never finish (each gives up after its timeout and reports 124)
    const dir = `/tmp/barrier-${process.pid}-${Date.now()}`;
    const script = (i: number) =>
      `mkdir -p ${dir}; touch ${dir}/${i}; until [ "$(ls ${dir} | wc -l)" -ge 8 ]; do sleep 0.02; done; echo ${i}`;
    const rs = await Promise.all(
      Array.from({ length: 8 }, (_, i) => run(h.backend, id, script(i), { timeoutMs: 45_000 })),
    );
    expect(rs.map((r) => r.stdout.trim())).toEqual(["0", "1", "2", "3", "4", "5", "6", "7"]);
    expect(rs.every((r) => r.exitCode === 0 && !r.timedOut)).toBe(true);
  });
});

describe("local exec input that outlives the command", () => {
  it("finishes when the command exits without reading its stdin stream, and drains the stream", async () => {
    const big = Readable.from(
      (function* () {
        for (let i = 0; i < 200; i++) yield Buffer.alloc(64 * 1024, "z");
      })(),
    );
    const r = await run(h.backend, id, ["sh", "-c", "echo done"], { stdin: big });
    expect(r).toMatchObject({ stdout: "done\n", exitCode: 0 });
    // drained or dropped, not left paused holding the generator: wait for that, with a generous bound
    await until(() => big.readableEnded || big.destroyed, 30_000);
  });
});
