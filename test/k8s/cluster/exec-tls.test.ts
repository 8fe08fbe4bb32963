// What each exec websocket costs the manager, through the real API server: one TLS context for
// all of them (not a CA and key parse per connection), and stdin in bounded messages (a
// megabyte message is a megabyte malloc per copy, which the allocator keeps: docs/benchmarks.md).
import { createHash, randomBytes } from "node:crypto";
import tls from "node:tls";
import type { KubeConfig } from "@kubernetes/client-node";
import WebSocket from "isomorphic-ws";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { systemClock } from "../../../runtime/core/clock.ts";
import { createExecApi, startExec } from "../../../runtime/k8s/exec.ts";
import { openPodPort } from "../../../runtime/k8s/portForward.ts";
import { createNamespace, loadKubeConfig, podManifest, runPod, type TestNamespace } from "../../support/cluster.ts";

let kc: KubeConfig;
let ns: TestNamespace;

beforeAll(async () => {
  kc = loadKubeConfig();
  ns = await createNamespace(kc, "exec-tls");
  await runPod(kc, ns.name, podManifest("a"));
});

afterAll(async () => {
  vi.restoreAllMocks();
  await ns?.delete();
});

async function run(exec: ReturnType<typeof createExecApi>, argv: string[], stdin?: Buffer) {
  const s = await startExec(exec, { namespace: ns.name, pod: "a", container: "main" }, argv, {
    stdin,
    clock: systemClock,
  });
  const out: Buffer[] = [];
  s.stdout.on("data", (c: Buffer) => out.push(c));
  s.stderr.resume();
  const r = await s.result;
  return { exitCode: r.exitCode, stdout: Buffer.concat(out).toString() };
}

describe("exec websockets", () => {
  it("share one TLS context per kubeconfig, however many connect, port-forwards too", async () => {
    // a kubeconfig of its own: contexts are cached per kubeconfig object
    const own = loadKubeConfig();
    const contexts = vi.spyOn(tls, "createSecureContext");
    try {
      const exec = createExecApi(own);
      const first = await run(exec, ["echo", "one"]);
      const rest = await Promise.all(Array.from({ length: 5 }, (_, i) => run(exec, ["echo", `n${i}`])));
      // a second exec API on the same kubeconfig (another backend replica) reuses it too
      const again = await run(createExecApi(own), ["echo", "again"]);
      // and so does a port-forward (the ports fallback) on it
      const forward = await openPodPort(own, { namespace: ns.name, pod: "a", sandboxId: "a", port: 1 });
      forward.on("error", () => undefined); // nothing listens on port 1: the refusal comes as an error
      forward.destroy();
      expect([first, ...rest, again].map((r) => r.stdout)).toEqual([
        "one\n",
        ...rest.map((_, i) => `n${i}\n`),
        "again\n",
      ]);
      expect(contexts).toHaveBeenCalledTimes(1);
    } finally {
      contexts.mockRestore();
    }
  });

  it("sends a large stdin in messages of at most 64 KiB, every byte in order", async () => {
    const input = randomBytes(1024 * 1024 + 3); // not a whole number of pieces
    const sends = vi.spyOn(WebSocket.prototype, "send");
    try {
      const r = await run(createExecApi(kc), ["sha256sum"], input);
      expect(r).toEqual({ exitCode: 0, stdout: `${createHash("sha256").update(input).digest("hex")}  -\n` });
      const sizes: number[] = sends.mock.calls.map((call: unknown[]) => (call[0] as Buffer).length);
      // the channel byte plus at most 64 KiB of input each; all of the input went
      expect(Math.max(...sizes)).toBeLessThanOrEqual(64 * 1024 + 1);
      expect(sizes.filter((n) => n > 2).reduce((a, n) => a + n - 1, 0)).toBe(input.length);
    } finally {
      sends.mockRestore();
    }
  });
});
