// A burst of execs into one small sandbox through the HTTP service: the helper starts commands
// one at a time, so a burst is capacity, never a fault. Every exec gets a 200 (it ran) or a 429
// with Retry-After (come back later); never a 502 from an overflowed listen backlog (EAGAIN at
// connect), which is what 500 parallel execs got before the per-sandbox start gate.
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { helperExec } from "../../runtime/local/protocol.ts";
import { auth, createReadySandbox, type LocalRuntime, parseExecFrames, startLocalRuntime } from "../support/local.ts";

const BURST = 500;

let rt: LocalRuntime;
let id: string;

beforeAll(async () => {
  rt = await startLocalRuntime();
  id = await createReadySandbox(rt, { size: "nano" });
}, 120_000);
afterAll(async () => {
  await rt?.close();
});

describe("a burst of execs into one nano sandbox", () => {
  it(`answers ${BURST} parallel execs with 200s and 429s (each with Retry-After) only`, async () => {
    const responses = await Promise.all(
      Array.from({ length: BURST }, (_, i) =>
        rt.app.inject({
          method: "POST",
          url: `/v1/sandboxes/${id}/exec`,
          headers: auth("alice"),
          payload: { command: ["sh", "-c", `echo ${i}`], timeoutMs: 120_000 },
        }),
      ),
    );
    const byStatus = new Map<number, number>();
    for (const r of responses) byStatus.set(r.statusCode, (byStatus.get(r.statusCode) ?? 0) + 1);
    const counts = Object.fromEntries(byStatus);
    console.log(`${BURST} parallel execs into one nano sandbox:`, counts);
    const other = responses.find((r) => r.statusCode !== 200 && r.statusCode !== 429);
    expect(other?.body, `statuses ${JSON.stringify(counts)}`).toBeUndefined();
    expect(byStatus.get(200) ?? 0, "some execs ran").toBeGreaterThan(0);
    responses.forEach((r, i) => {
      if (r.statusCode === 200) {
        const f = parseExecFrames(r.body);
        expect({ error: f.error, exit: f.exit?.exitCode, stdout: f.stdout }).toEqual({
          error: undefined,
          exit: 0,
          stdout: `${i}\n`,
        });
      } else {
        expect(Number(r.headers["retry-after"]), r.body).toBeGreaterThan(0);
        expect(r.json().error.code).toBe("capacity");
      }
    });
    // and the sandbox is still fine afterwards
    const after = await rt.app.inject({
      method: "POST",
      url: `/v1/sandboxes/${id}/exec`,
      headers: auth("alice"),
      payload: { command: ["echo", "still-here"] },
    });
    expect(parseExecFrames(after.body)).toMatchObject({ stdout: "still-here\n", exit: { exitCode: 0 } });
  }, 300_000);
});

describe("a helper socket whose accept queue stays full", () => {
  it("reports a start that fails at connect with code EAGAIN (exec answers it 429, not 502)", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sbx-backlog-"));
    const sock = path.join(dir, "helper.sock");
    // a listener that never accepts, with the smallest backlog: what a helper starved in a burst looks like
    const py =
      "import socket,sys,time\ns=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\ns.listen(0)\nprint('up',flush=True)\ntime.sleep(120)";
    const listener = spawn("python3", ["-c", py, sock], { stdio: ["ignore", "pipe", "inherit"] });
    const held: net.Socket[] = [];
    try {
      await new Promise((resolve, reject) => {
        listener.once("error", reject);
        listener.stdout!.once("data", resolve);
      });
      for (let i = 0; i < 4; i++) {
        const c = net.createConnection(sock);
        c.on("error", () => {}); // the ones past the backlog fail: that is the point
        held.push(c);
      }
      const h = helperExec(sock, { cgroup: "xfull", cwd: "/", argv: ["true"], env: {} });
      const start = await h.started;
      expect(start).toMatchObject({ kind: "failed", stage: "connect", code: "EAGAIN" });
      h.destroy();
    } finally {
      for (const c of held) c.destroy();
      listener.kill("SIGKILL");
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
