// Processes by pid from ANY replica (issue 13): two service replicas on the real test control
// plane, the real SDK. A command started through replica A lives in the pod's helper registry,
// so replica B lists it (cmd, args, tag), feeds its stdin, reads it (connect replays the ring)
// and kills it; a pty A started, B types into, resizes and reads as a terminal; and after A
// crashed, B still lists and kills what A started.
import { CommandExitError, Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import { waitFor } from "../../support/cluster.ts";
import type { TestNamespaces } from "../runtime/support.ts";
import {
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  testConfig,
  testKubeconfigPath,
} from "../runtime/support.ts";
import { type Replica, sdkOptions, startReplica } from "./replicas.ts";

let ns: TestNamespaces;
let config: RuntimeConfig;
let a: Replica;
let b: Replica;
let sA: Sandbox;
let sB: Sandbox;

/** The SDK's own Connect client (the Start call the SDK makes, with the tag its commands.run has no option for). */
interface ProcessRpc {
  start(
    req: { process: { cmd: string; args: string[] }; tag: string; stdin: boolean },
    opts: { signal: AbortSignal; headers: Record<string, string> },
  ): AsyncIterable<{ event?: { event: { case: string; value: { pid?: number } } } }>;
}

/** Starts `sh -c script` tagged `tag` through the SDK's client and returns its pid; the stream is then dropped. */
async function startTagged(s: Sandbox, script: string, tag: string): Promise<number> {
  const rpc = (s.commands as unknown as { rpc: ProcessRpc }).rpc;
  const abort = new AbortController();
  const events = rpc.start(
    { process: { cmd: "/bin/sh", args: ["-c", script] }, tag, stdin: false },
    { signal: abort.signal, headers: { "Connect-Timeout-Ms": "300000" } },
  );
  for await (const e of events) {
    if (e.event?.event.case === "start") {
      abort.abort(); // the command goes on: a client that goes away only detaches
      return e.event.event.value.pid ?? -1;
    }
  }
  throw new Error("the start stream ended without a start event");
}

beforeAll(async () => {
  const clients = adminClients(await testKubeconfigPath());
  await installSandboxCrd(clients.kc);
  ns = await freshNamespaces(clients.core, "e2b-procs");
  config = testConfig(ns, { listen: { host: "127.0.0.1", port: 0 } });
  [a, b] = await Promise.all([startReplica(config, "procs-a"), startReplica(config, "procs-b")]);
  await waitFor("a leader", async () => a.leads() || b.leads(), 15_000);
  sA = await Sandbox.create("base", { ...sdkOptions(a), timeoutMs: 600_000 });
  // the same sandbox with envd on B; B learns the token from its watch of the Sandbox resources
  sB = await Sandbox.connect(sA.sandboxId, sdkOptions(a, b));
  const token = (sB as unknown as { envdAccessToken: string }).envdAccessToken;
  await waitFor(
    "B's envd accepts the token",
    async () => !!(await b.layer.access.resolve(sA.sandboxId, token)),
    30_000,
  );
}, 240_000);

afterAll(async () => {
  if (sA) await Sandbox.kill(sA.sandboxId, sdkOptions(b)).catch(() => undefined);
  for (const r of [b, a]) await r?.close();
  await ns?.cleanup();
});

describe("processes by pid across replicas (Kubernetes platform)", () => {
  it("a command started through A: B lists it, feeds its stdin, reads it and kills it", async () => {
    const outA: string[] = [];
    const h = await sA.commands.run("cat", {
      background: true,
      stdin: true,
      timeoutMs: 300_000,
      onStdout: (d) => void outA.push(d),
    });
    const tagged = await startTagged(sA, "sleep 300", "job-7");

    const listed = await sB.commands.list();
    expect(listed).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ pid: h.pid, cmd: "/bin/bash", args: ["-l", "-c", "cat"] }),
        expect.objectContaining({ pid: tagged, tag: "job-7", cmd: "/bin/sh", args: ["-c", "sleep 300"] }),
      ]),
    );
    expect(h.pid, "a kernel pid, not a replica's handle").toBeLessThan(1000);

    // B's write takes the command from A's reader for a moment; A reads on from where it was
    await sB.commands.sendStdin(h.pid, "one\n");
    await expect.poll(() => outA.join(""), { timeout: 30_000 }).toBe("one\n");

    await h.disconnect();
    const outB: string[] = [];
    const hB = await sB.commands.connect(h.pid, { onStdout: (d) => void outB.push(d) });
    await sB.commands.sendStdin(h.pid, "two\n");
    // the ring replays what came before B attached
    await expect.poll(() => outB.join(""), { timeout: 30_000 }).toBe("one\ntwo\n");

    expect(await sB.commands.kill(h.pid)).toBe(true);
    await expect(hB.wait()).rejects.toBeInstanceOf(CommandExitError);
    expect(await sB.commands.kill(h.pid)).toBe(false);
    expect((await sA.commands.list()).map((p) => p.pid)).not.toContain(h.pid);

    expect(await sB.commands.kill(tagged)).toBe(true);
    expect(await sA.commands.kill(tagged)).toBe(false);
  });

  it("a pty started through A: B types into it, resizes it, and connects to it as a terminal", async () => {
    const screen = () => {
      const decoder = new TextDecoder();
      const s = {
        text: "",
        onData: (d: Uint8Array) => {
          s.text += decoder.decode(d, { stream: true });
        },
      };
      return s;
    };
    const onA = screen();
    const h = await sA.pty.create({ cols: 80, rows: 24, onData: onA.onData, timeoutMs: 300_000 });
    const type = (s: string) => sB.pty.sendInput(h.pid, new TextEncoder().encode(s));
    // B knows it as a pty from the label A's start stored: pty input is refused for a command on pipes
    await type("echo via-b-$((3*4))\n");
    await expect.poll(() => onA.text, { timeout: 30_000 }).toContain("via-b-12");
    await sB.pty.resize(h.pid, { cols: 66, rows: 11 }); // an attach of B's own, while A reads it
    await h.disconnect();
    const onB = screen();
    const hB = await sB.pty.connect(h.pid, { onData: onB.onData, timeoutMs: 300_000 });
    await type("stty size\n");
    await expect.poll(() => onB.text, { timeout: 30_000 }).toContain("11 66");
    expect(await sB.pty.kill(h.pid)).toBe(true);
    await expect(hB.wait()).rejects.toMatchObject({ exitCode: -1 });
  });

  it("A crashed: B still lists and kills what A started, and a restarted A reads it", async () => {
    const g = await sA.commands.run("echo before-the-crash; sleep 300", { background: true, timeoutMs: 300_000 });
    await a.crash();
    expect((await sB.commands.list()).map((p) => p.pid)).toContain(g.pid);

    const again = await startReplica(config, "procs-a2");
    try {
      const s2 = await Sandbox.connect(sA.sandboxId, sdkOptions(b, again));
      const token = (s2 as unknown as { envdAccessToken: string }).envdAccessToken;
      await waitFor(
        "A2 accepts the token",
        async () => !!(await again.layer.access.resolve(sA.sandboxId, token)),
        30_000,
      );
      const out: string[] = [];
      const h2 = await s2.commands.connect(g.pid, { onStdout: (d) => void out.push(d) });
      await expect.poll(() => out.join(""), { timeout: 30_000 }).toBe("before-the-crash\n");

      expect(await sB.commands.kill(g.pid)).toBe(true);
      await expect(h2.wait()).rejects.toMatchObject({ exitCode: -1 });
      expect(await s2.commands.kill(g.pid)).toBe(false);
    } finally {
      await again.close();
    }
  });
});
