// sbx-kubelet kills what no pod owns, as a real kubelet's housekeeping does (issue 39: a
// force-deleted pod's bubblewrap and its `sleep` outlived the whole suite run). The race: an exec
// that read the pod just before a force delete started the container after the delete was
// processed, and nothing ever stopped it. Here pods are force-deleted at several delays after
// creation while execs keep arriving, and no process of theirs may remain; and a process that
// names a pod directory but belongs to no pod is killed by the reconcile loop.
import { spawn } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { CoreV1Api, Exec, type KubeConfig } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { describeLeftovers, type Leftover, processesUnder } from "../../../tools/control-plane/leftovers.ts";
import { createNamespace, loadKubeConfig, podManifest, type TestNamespace } from "../../support/cluster.ts";

/** sbx-kubelet reconciles every 5 s (reconcile.go); a bound far above that for a loaded machine */
const BOUND_MS = 45_000;

let kc: KubeConfig;
let core: CoreV1Api;
let ns: TestNamespace;

beforeAll(async () => {
  kc = loadKubeConfig();
  core = kc.makeApiClient(CoreV1Api);
  ns = await createNamespace(kc, "orphans");
});

afterAll(async () => {
  await ns?.delete();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Processes of the pods with these UIDs still alive after up to BOUND_MS (none expected). */
async function survivors(uids: string[]): Promise<Leftover[]> {
  const dirs = uids.map((u) => join(inject("podsDir"), u));
  const deadline = Date.now() + BOUND_MS;
  let left = processesUnder(dirs);
  while (left.length > 0 && Date.now() < deadline) {
    await sleep(250);
    left = processesUnder(dirs);
  }
  return left;
}

/** Starts an exec and lets it run its course; refusals (the pod is gone) are expected. */
function execAndForget(pod: string): void {
  const sink = new PassThrough().resume();
  new Exec(kc)
    .exec(ns.name, pod, "main", ["sleep", "30"], sink, sink, null, false)
    .then((ws) => ws.on("error", () => undefined))
    .catch(() => undefined);
}

/**
 * Creates the pod, fires an exec every 10 ms from its creation (each one that reads the pod
 * before the delete may start the container, the first at once), force-deletes it after
 * `delayMs`, and keeps the execs coming for 300 ms after that. Answers the pod's UID.
 */
async function createExecDelete(name: string, delayMs: number): Promise<string> {
  const pod = await core.createNamespacedPod({ namespace: ns.name, body: podManifest(name) });
  const execs = setInterval(() => execAndForget(name), 10);
  try {
    await sleep(delayMs);
    await core.deleteNamespacedPod({ name, namespace: ns.name, gracePeriodSeconds: 0 });
    await sleep(300);
  } finally {
    clearInterval(execs);
  }
  return pod.metadata!.uid!;
}

describe("sbx-kubelet kills what no pod owns", () => {
  it("leaves no process of a pod force-deleted while execs start its container", async () => {
    const uids: string[] = [];
    const delays = [0, 20, 50, 100, 150, 250, 400, 600, 900, 1300];
    for (const [i, d] of delays.entries()) uids.push(await createExecDelete(`race-${i}`, d));
    const left = await survivors(uids);
    expect(
      left,
      `processes of force-deleted pods still alive after ${BOUND_MS} ms:\n${describeLeftovers(left)}`,
    ).toEqual([]);
  });

  it("kills a process that names a pod directory no pod owns", async () => {
    const dir = join(inject("podsDir"), "00000000-0000-4000-8000-00000000dead");
    mkdirSync(join(dir, "paths"), { recursive: true });
    // sh itself stays (its argv names the directory); what it leaves when killed is a 1 s sleep
    const stray = spawn("sh", ["-c", "while :; do sleep 1; done", "sbx-stray", join(dir, "paths")], {
      stdio: "ignore",
    });
    stray.on("error", () => undefined);
    const exited = new Promise<string | null>((r) => stray.once("exit", (_code, signal) => r(signal)));
    try {
      const signal = await Promise.race([exited, sleep(BOUND_MS).then(() => "still running")]);
      expect(signal, `pid ${stray.pid} still ran ${BOUND_MS} ms after it started`).toBe("SIGKILL");
    } finally {
      stray.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
