// E2B's pty API against the real, unmodified SDK on the local platform (issue 32, item 2):
// pty.create runs the SDK's `bash -i -l` on a pseudo-terminal in a real bubblewrap sandbox,
// `tty` names /dev/pts/N, input echoes, a resize reaches `stty size`, kill ends it, and a pty
// outlives the request that started it: pty.connect by pid after that request ended sees
// output typed later. Bad sizes and misuse are 4xx (the SDK's InvalidArgumentError or NotFound).
import { InvalidArgumentError, Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ptyCreateResizeKill, ptyReconnect } from "../support/e2bPty.ts";
import { type LocalRuntime, startLocalRuntime, TOKENS } from "../support/local.ts";

let rt: LocalRuntime;
let sbx: Sandbox;
let url: string;

beforeAll(async () => {
  rt = await startLocalRuntime({ budget: { cpu: "8", memory: "16Gi" } });
  url = await rt.app.listen({ host: "127.0.0.1", port: 0 });
  sbx = await Sandbox.create("base", { apiKey: TOKENS.alice, apiUrl: url, sandboxUrl: url, timeoutMs: 600_000 });
}, 120_000);

afterAll(async () => {
  await sbx?.kill().catch(() => undefined);
  await rt?.close();
});

const type = (pid: number, s: string) => sbx.pty.sendInput(pid, new TextEncoder().encode(s));

describe("sandbox.pty", () => {
  it("create runs bash -i on /dev/pts/N; input echoes; resize changes stty size; kill ends it", async () => {
    const h = await ptyCreateResizeKill(sbx);
    expect(await sbx.pty.kill(h.pid)).toBe(false); // gone: NotFound
  });

  it("outlives the request that started it: connect by pid after it ended shows new output", async () => {
    const first = await ptyReconnect(sbx);
    expect(first.text).not.toContain("after-55"); // the dropped request saw none of it
  });

  it.each([0, 100_000])("a pty of %i columns is refused, naming pty.size.cols", async (cols) => {
    const err = await sbx.pty.create({ cols, rows: 24, onData: () => undefined }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(String((err as Error).message)).toContain("pty.size.cols");
  });

  it("resize of a finished pty is NotFound; resize of a command without a pty is refused", async () => {
    const h = await sbx.pty.create({ cols: 80, rows: 24, onData: () => undefined });
    await type(h.pid, "exit 0\n");
    await h.wait();
    const gone = await sbx.pty.resize(h.pid, { cols: 90, rows: 20 }).catch((e: unknown) => e);
    expect(String((gone as Error).message)).toMatch(/not found/);
    const plain = await sbx.commands.run("sleep 60", { background: true });
    const err = await sbx.pty.resize(plain.pid, { cols: 90, rows: 20 }).catch((e: unknown) => e);
    expect(String((err as Error).message)).toContain("has no pty");
    await plain.kill();
  });

  it("another owner's sandbox cannot type into this pty", async () => {
    const h = await sbx.pty.create({ cols: 80, rows: 24, onData: () => undefined });
    const other = await Sandbox.create("base", {
      apiKey: TOKENS.bob,
      apiUrl: url,
      sandboxUrl: url,
      timeoutMs: 600_000,
    });
    try {
      const err = await other.pty.sendInput(h.pid, new TextEncoder().encode("echo x\n")).catch((e: unknown) => e);
      expect(String((err as Error).message)).toMatch(/not found/);
    } finally {
      await sbx.pty.kill(h.pid);
      await other.kill();
    }
  });
});
