// E2B's pty API with the real, unmodified SDK on the Kubernetes platform (issue 32, item 2):
// the service as `npm start` wires it, pods on the suite's control plane, the terminal opened by
// the pod's helper daemon. pty.create runs the SDK's `bash -i -l` on /dev/pts/N, input echoes, a
// resize reaches `stty size`, kill ends it, and a pty outlives the request that started it:
// pty.connect by pid after that request ended sees output typed later. The same assertions as
// the local platform's test/e2b/envd-pty.test.ts.
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Service } from "../../../runtime/server/service.ts";
import { TOKENS } from "../../support/local.ts";
import { startTestService, type TestService } from "../runtime/service-support.ts";
import type { TestNamespaces } from "../runtime/support.ts";

let t: TestService;
let ns: TestNamespaces;
let service: Service;
let sbx: Sandbox;

beforeAll(async () => {
  t = await startTestService("e2b-pty");
  ({ ns, service } = t);
  sbx = await Sandbox.create("base", {
    apiKey: TOKENS.alice,
    apiUrl: service.url,
    sandboxUrl: service.url,
    requestTimeoutMs: 150_000,
    timeoutMs: 600_000,
  });
}, 240_000);

afterAll(async () => {
  await sbx?.kill().catch(() => undefined);
  await service?.close();
  await ns?.cleanup();
});

/** What a terminal showed so far, and a wait for text on it (generous: the machine is busy). */
function terminal() {
  let text = "";
  const decoder = new TextDecoder();
  return {
    onData: (d: Uint8Array) => {
      text += decoder.decode(d, { stream: true });
    },
    get text() {
      return text;
    },
    async waitFor(re: RegExp, ms = 30_000): Promise<RegExpMatchArray> {
      for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 20))) {
        const m = text.match(re);
        if (m) return m;
      }
      throw new Error(`no ${re} on the terminal within ${ms} ms; it shows ${JSON.stringify(text.slice(-500))}`);
    },
  };
}

const type = (pid: number, s: string) => sbx.pty.sendInput(pid, new TextEncoder().encode(s));

describe("sandbox.pty (Kubernetes platform)", () => {
  it("create runs bash -i on /dev/pts/N; input echoes; resize changes stty size; kill ends it", async () => {
    const t = terminal();
    const h = await sbx.pty.create({ cols: 100, rows: 30, onData: t.onData, envs: { PTY_MARK: "m-1" }, cwd: "/tmp" });
    await type(h.pid, 'tty; echo "$PTY_MARK $TERM $(pwd) $-"\n');
    await t.waitFor(/\/dev\/pts\/\d+/);
    const m = await t.waitFor(/m-1 (\S+) (\S+) (\S+)/);
    expect(m[1]).toBe("xterm-256color");
    expect(m[2]).toBe("/tmp");
    expect(m[3]).toContain("i"); // an interactive shell
    expect(t.text).toContain('echo "$PTY_MARK'); // the terminal echoed what was typed
    await type(h.pid, "stty size\n");
    await t.waitFor(/30 100/);
    await sbx.pty.resize(h.pid, { cols: 91, rows: 17 });
    await type(h.pid, "stty size\n");
    await t.waitFor(/17 91/);
    expect(await sbx.pty.kill(h.pid)).toBe(true);
    const r = await h.wait().catch((e: unknown) => e);
    expect(r).toMatchObject({ exitCode: -1 });
  });

  it("outlives the request that started it: connect by pid after it ended shows new output", async () => {
    const first = terminal();
    const h = await sbx.pty.create({ cols: 80, rows: 24, onData: first.onData, timeoutMs: 120_000 });
    await type(h.pid, "echo before-$((40+2))\n");
    await first.waitFor(/before-42/);
    await h.disconnect(); // the Start stream ends; the pty goes on
    expect((await sbx.commands.list()).some((p) => p.pid === h.pid)).toBe(true);
    const second = terminal();
    const again = await sbx.pty.connect(h.pid, { onData: second.onData, timeoutMs: 120_000 });
    await type(h.pid, "echo after-$((50+5))\n");
    await second.waitFor(/after-55/);
    await type(h.pid, "exit 7\n");
    const r = await again.wait().catch((e: unknown) => e);
    expect(r).toMatchObject({ exitCode: 7 });
  });
});
