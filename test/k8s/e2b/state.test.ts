// The E2B layer's state is shared and durable on Kubernetes: it lives in the Sandbox resource's
// spec.metadata (Manager.updateMetadata), so two service replicas against the real test control
// plane agree on it, and a restarted one finds it. With the real SDK: a setTimeout through
// replica A is what replica B's getInfo shows and B's sweeper honours; a token minted by connect
// on A opens envd on B; a restarted service sweeps a sandbox whose end passed while it was down.
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import { NotFoundError } from "../../../runtime/core/errors.ts";
import { RESERVED } from "../../../runtime/server/e2b/shape.ts";
import { waitFor } from "../../support/cluster.ts";
import {
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  type TestNamespaces,
  testConfig,
  testKubeconfigPath,
} from "../runtime/support.ts";
import { type Replica, sdkOptions, startReplica } from "./replicas.ts";

let ns: TestNamespaces;
let config: RuntimeConfig;
const open: Replica[] = [];

async function replica(identity: string): Promise<Replica> {
  const r = await startReplica(config, identity);
  open.push(r);
  return r;
}

const sdk = sdkOptions;

const endOn = async (r: Replica, id: string) => (await Sandbox.getInfo(id, sdk(r))).endAt.getTime();
const gone = (r: Replica, id: string) =>
  r.manager.get("alice", id).then(
    () => false,
    (err) => err instanceof NotFoundError,
  );

beforeAll(async () => {
  const clients = adminClients(await testKubeconfigPath());
  await installSandboxCrd(clients.kc);
  ns = await freshNamespaces(clients.core, "e2b-state");
  config = testConfig(ns, { listen: { host: "127.0.0.1", port: 0 } });
}, 120_000);

afterAll(async () => {
  for (const r of open.reverse()) await r.close();
  await ns?.cleanup();
});

describe("E2B state shared by replicas (Kubernetes platform)", () => {
  let a: Replica;
  let b: Replica;

  beforeAll(async () => {
    [a, b] = await Promise.all([replica("e2b-a"), replica("e2b-b")]);
    await waitFor("a leader", async () => a.leads() || b.leads(), 15_000);
  }, 120_000);

  it("a setTimeout through A is B's getInfo and B's sweeper honours it", async () => {
    const s = await Sandbox.create("base", { ...sdk(a), timeoutMs: 60_000 });
    await s.setTimeout(600_000); // later than the create-time end
    const moved = await endOn(a, s.sandboxId);
    await waitFor("B sees the moved end", async () => (await endOn(b, s.sandboxId)) === moved, 30_000);

    b.skew.ms = 120_000; // past the create-time end, well before the moved one
    await b.layer.sweeper.sweep();
    expect(await gone(b, s.sandboxId)).toBe(false);

    await s.setTimeout(30_000); // and shorter again, through A
    const shorter = await endOn(a, s.sandboxId);
    await waitFor("B sees the shorter end", async () => (await endOn(b, s.sandboxId)) === shorter, 30_000);
    b.skew.ms = 60_000;
    await b.layer.sweeper.sweep();
    await waitFor("A sees B's kill", () => gone(a, s.sandboxId), 30_000);
    b.skew.ms = 0;
  });

  it("a token minted by connect on A opens envd on B", async () => {
    // created through our own API: no create-time token, so connect mints one
    const made = await a.manager.create({ owner: "alice", profile: "base", size: "nano", idleTimeoutSeconds: 0 });
    await a.manager.wait("alice", made.id, { timeoutMs: 120_000 });
    // connect goes to A (the API), every envd call to B
    const s = await Sandbox.connect(made.id, sdk(a, b));
    expect((await a.manager.get("alice", made.id)).metadata[RESERVED.connectTokenHash]).toMatch(/^[0-9a-f]{64}$/);
    const token = (s as unknown as { envdAccessToken: string }).envdAccessToken;
    // B learns of A's write through its watch of the Sandbox resources: in milliseconds, not at once
    await waitFor("B's envd accepts the token", async () => !!(await b.layer.access.resolve(made.id, token)), 30_000);
    const r = await s.commands.run("echo from-b");
    expect(r.stdout).toBe("from-b\n");
    expect(await s.kill()).toBe(true);
  });

  it("a restarted service sweeps a sandbox whose end passed while it was down", async () => {
    const s = await Sandbox.create("base", { ...sdk(a), timeoutMs: 30_000 });
    await a.crash();
    const again = await replica("e2b-a2");
    again.skew.ms = 60_000;
    // its first pass, before anyone called it: the sweeper lists every owner's E2B sandboxes
    await again.layer.sweeper.sweep();
    await waitFor("B sees the restarted replica's kill", () => gone(b, s.sandboxId), 30_000);
  });
});
