// The manager/controller split, in-process against the real control plane: a controller-only
// and a manager-only service, each authenticated as its own service account bound to exactly
// its role's rules (contract.ts roleRules, what the Pulumi package deploys). The controller
// holds the Lease, fills the warm pool and serves no API; the manager serves create -> exec ->
// kill and never campaigns. Then the controller stops, and the manager alone still creates,
// runs and kills sandboxes (it reconciles what it starts) while nobody refills the pool.
import { CoreV1Api, type KubeConfig, RbacAuthorizationV1Api } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Role } from "../../../runtime/config/role.ts";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import { systemClock } from "../../../runtime/core/clock.ts";
import { silentLogger } from "../../../runtime/core/log.ts";
import type { KubernetesPlatform } from "../../../runtime/k8s/assemble.ts";

import { clientsFor, isNotFound, type KubeClients, PooledKubeConfig, statusCode } from "../../../runtime/k8s/client.ts";
import { LABELS, POOL, type PolicyRule, roleRules } from "../../../runtime/k8s/contract.ts";
import { type Service, startService } from "../../../runtime/server/service.ts";
import { registryUrl, serviceAccountKubeConfig, waitFor } from "../../support/cluster.ts";
import { auth, parseExecFrames, testTokens } from "../../support/local.ts";
import {
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  type TestNamespaces,
  testConfig,
  testKubeconfigPath,
  testPlatform,
} from "./support.ts";

const POOL_SIZE = 2;
let admin: KubeClients;
let ns: TestNamespaces;
let config: RuntimeConfig;
let controller: Service | undefined;
let manager: Service;
let managerPlatform: KubernetesPlatform;
const kcs: Partial<Record<"manager" | "controller", KubeConfig>> = {};

async function grant(namespace: string, name: string, rules: PolicyRule[], sa: string): Promise<void> {
  const rbac = admin.kc.makeApiClient(RbacAuthorizationV1Api);
  await rbac.createNamespacedRole({ namespace, body: { metadata: { name }, rules } });
  await rbac.createNamespacedRoleBinding({
    namespace,
    body: {
      metadata: { name },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
      subjects: [{ kind: "ServiceAccount", name: sa, namespace: ns.runtime }],
    },
  });
}

/** A service account bound to exactly one role's rules, as its kubeconfig. */
async function roleIdentity(role: "manager" | "controller"): Promise<KubeConfig> {
  const sa = `sbx-${role}`;
  await admin.core.createNamespacedServiceAccount({ namespace: ns.runtime, body: { metadata: { name: sa } } });
  const rules = roleRules(role, config.kubernetes.leaseName);
  await grant(ns.sandboxes, `${sa}-sandboxes`, rules.sandboxNamespace, sa);
  if (rules.runtimeNamespace.length) await grant(ns.runtime, `${sa}-runtime`, rules.runtimeNamespace, sa);
  const kc = new PooledKubeConfig();
  kc.loadFromString((await serviceAccountKubeConfig(admin.kc, ns.runtime, sa)).exportConfig());
  return kc;
}

async function startRole(role: Role, identity: string, kc: KubeConfig): Promise<[Service, KubernetesPlatform]> {
  // short lease timings (testPlatform) so a takeover, if the split broke, shows within seconds
  const platform = testPlatform(config, clientsFor(kc), { identity }, role);
  const svc = await startService({
    config,
    tokens: testTokens(),
    logger: silentLogger(),
    clock: systemClock,
    platform,
    role,
    identity,
    host: "127.0.0.1",
    port: 0,
    reaperIntervalMs: 500,
  });
  return [svc, platform];
}

async function leaseHolder(): Promise<string | undefined> {
  try {
    const lease = await admin.coordination.readNamespacedLease({
      name: config.kubernetes.leaseName,
      namespace: ns.runtime,
    });
    return lease.spec?.holderIdentity ?? "";
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

async function poolPods(): Promise<{ warm: number; ready: number; names: string[] }> {
  const pods = await admin.core.listNamespacedPod({
    namespace: ns.sandboxes,
    labelSelector: `${LABELS.pool}=${POOL.warm}`,
  });
  const live = pods.items.filter((p) => !p.metadata?.deletionTimestamp);
  const ready = live.filter((p) => p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"));
  return { warm: live.length, ready: ready.length, names: live.map((p) => p.metadata!.name!) };
}

async function run(svc: Service, id: string, script: string): Promise<string> {
  const exec = await svc.app.inject({
    method: "POST",
    url: `/v1/sandboxes/${id}/exec`,
    headers: auth("alice"),
    payload: { command: ["sh", "-c", script] },
  });
  expect(exec.statusCode, exec.body).toBe(200);
  const frames = parseExecFrames(exec.body);
  expect(frames.exit?.exitCode, exec.body).toBe(0);
  return frames.stdout;
}

/**
 * create -> wait -> exec -> (pause -> resume -> the file is still there) -> kill through a
 * service's API; returns whether the create was served from the warm pool.
 */
async function lifecycle(svc: Service, size: string, pause = false): Promise<{ id: string; warm: boolean }> {
  const created = await svc.app.inject({
    method: "POST",
    url: "/v1/sandboxes",
    headers: auth("alice"),
    payload: { size },
  });
  expect(created.statusCode, created.body).toBe(201);
  const id: string = created.json().id;
  const waited = await svc.app.inject({
    method: "POST",
    url: `/v1/sandboxes/${id}/wait`,
    headers: auth("alice"),
    payload: { timeoutSeconds: 90 },
  });
  expect(waited.statusCode, waited.body).toBe(200);
  expect(await run(svc, id, "echo role-$((6*7)) > /workspace/f && cat /workspace/f")).toBe("role-42\n");
  if (pause) {
    for (const op of ["pause", "resume"]) {
      const r = await svc.app.inject({ method: "POST", url: `/v1/sandboxes/${id}/${op}`, headers: auth("alice") });
      expect(r.statusCode, `${op}: ${r.body}`).toBe(200);
    }
    // the resumed sandbox's new pod was made by this process's own reconcile when no controller runs
    expect(await run(svc, id, "cat /workspace/f")).toBe("role-42\n");
  }
  const killed = await svc.app.inject({ method: "DELETE", url: `/v1/sandboxes/${id}`, headers: auth("alice") });
  expect(killed.statusCode, killed.body).toBe(204);
  return { id, warm: waited.json().warm === true };
}

beforeAll(async () => {
  admin = adminClients(await testKubeconfigPath());
  await installSandboxCrd(admin.kc);
  ns = await freshNamespaces(admin.core, "rt-roles");
  config = testConfig(ns, {
    listen: { host: "127.0.0.1", port: 0 },
    snapshots: { registry: registryUrl(), repository: `snap-${ns.sandboxes}` },
    defaults: { finishedGraceSeconds: 0 },
    warmPool: [{ profile: "base", size: "nano", count: POOL_SIZE }],
  });
  kcs.manager = await roleIdentity("manager");
  kcs.controller = await roleIdentity("controller");
  [controller] = await startRole("controller", "ctl-1", kcs.controller);
  [manager, managerPlatform] = await startRole("manager", "mgr-1", kcs.manager);
}, 120_000);

afterAll(async () => {
  await controller?.close();
  await manager?.close();
  await ns?.cleanup();
});

describe("controller role", () => {
  it("serves /healthz, /readyz and /metrics, and no API route: 404 with our error body", async () => {
    const svc = controller!;
    for (const path of ["/healthz", "/readyz", "/metrics"]) {
      const r = await fetch(`${svc.url}${path}`);
      expect(r.status, path).toBe(200);
      await r.text();
    }
    const calls = [
      { method: "GET" as const, url: "/v1/sandboxes" },
      { method: "POST" as const, url: "/v1/sandboxes", payload: { size: "nano" } },
      { method: "GET" as const, url: "/v1/pool" },
      { method: "GET" as const, url: "/openapi.json" },
    ];
    for (const c of calls) {
      const r = await svc.app.inject({ ...c, headers: auth("alice") });
      expect(r.statusCode, `${c.method} ${c.url}: ${r.body}`).toBe(404);
      expect(r.json().error).toMatchObject({ code: "not_found" });
      expect(r.json().error.message).toContain(`no route ${c.method}`);
    }
  });

  it("holds the Lease and fills the warm pool", async () => {
    await waitFor("the controller holds the Lease", async () => (await leaseHolder()) === "ctl-1", 30_000);
    await waitFor("the controller filled the warm pool", async () => (await poolPods()).ready === POOL_SIZE, 90_000);
  });

  it("least privilege: the manager's identity cannot touch the Lease, the controller's cannot accept creates", async () => {
    const asManager = clientsFor(kcs.manager!);
    const read = await asManager.coordination
      .readNamespacedLease({ name: config.kubernetes.leaseName, namespace: ns.runtime })
      .catch((e) => e);
    expect(statusCode(read)).toBe(403);
    // The manager may create Leases (its budget shares Lease; RBAC cannot limit create by name),
    // but it can read and update only that one: never the controller Lease.
    const update = await asManager.coordination
      .replaceNamespacedLease({
        name: config.kubernetes.leaseName,
        namespace: ns.runtime,
        body: { metadata: { name: config.kubernetes.leaseName }, spec: { holderIdentity: "sbx-manager-steals" } },
      })
      .catch((e) => e);
    expect(statusCode(update)).toBe(403);
    const asController = clientsFor(kcs.controller!);
    const record = await asController.custom
      .createNamespacedCustomObject({
        group: "sbx.dev",
        version: "v1alpha1",
        namespace: ns.sandboxes,
        plural: "sandboxes",
        body: { apiVersion: "sbx.dev/v1alpha1", kind: "Sandbox", metadata: { name: "not-mine" }, spec: {} },
      })
      .catch((e) => e);
    expect(statusCode(record)).toBe(403);
    const secrets = await kcs
      .controller!.makeApiClient(CoreV1Api)
      .listNamespacedSecret({ namespace: ns.sandboxes })
      .catch((e) => e);
    expect(statusCode(secrets)).toBe(403);
  });
});

describe("manager role with a controller", () => {
  it("serves create -> exec -> kill; a claim takes a pod the controller filled, which it refills", async () => {
    const before = await poolPods();
    expect(before.ready).toBe(POOL_SIZE);
    const warm = await lifecycle(manager, "nano");
    expect(warm.warm).toBe(true);
    const cold = await lifecycle(manager, "small"); // no pool for small: the pod is reconciled
    expect(cold.warm).toBe(false);
    await waitFor(
      "the controller refilled the pool",
      async () => {
        const now = await poolPods();
        return now.ready === POOL_SIZE && now.names.some((n) => !before.names.includes(n));
      },
      90_000,
    );
  });

  it("never campaigns: the controller keeps the Lease, without a transition", async () => {
    expect(managerPlatform.replicas.leads()).toBe(false);
    expect(await leaseHolder()).toBe("ctl-1");
    const lease = await admin.coordination.readNamespacedLease({
      name: config.kubernetes.leaseName,
      namespace: ns.runtime,
    });
    expect(lease.spec?.leaseTransitions ?? 0).toBe(0);
  });
});

describe("manager role with no controller", () => {
  let before: Awaited<ReturnType<typeof poolPods>>;
  let claimed = 0;

  it("still creates, runs, pauses, resumes and kills sandboxes: it reconciles what it starts", async () => {
    await controller!.close();
    controller = undefined;
    // a stopping leader releases the Lease: an empty holder anyone may take at once
    expect(await leaseHolder()).toBe("");
    before = await poolPods();
    const cold = await lifecycle(manager, "small", true);
    expect(cold.warm).toBe(false);
    const warm = await lifecycle(manager, "nano"); // the pool the controller left still serves claims
    expect(warm.warm).toBe(before.ready > 0);
    if (warm.warm) claimed++;
  }, 240_000);

  it("never takes the Lease nor refills the pool, even with the rights to", async () => {
    // RBAC alone keeps the service-account manager off the Lease; one with the admin's rights
    // shows the code itself does not campaign. Lease retry is 500 ms (testPlatform): a
    // campaigning manager would hold the released Lease, and refill the pool, within these 5 s.
    const [unrestricted] = await startRole("manager", "mgr-admin", admin.kc);
    try {
      expect((await lifecycle(unrestricted, "small")).warm).toBe(false);
      await new Promise((r) => setTimeout(r, 5_000));
      expect(await leaseHolder()).toBe("");
      const after = await poolPods();
      expect(after.names.filter((n) => !before.names.includes(n))).toEqual([]);
      expect(after.warm).toBe(before.warm - claimed);
    } finally {
      await unrestricted.close();
    }
  }, 120_000);

  it("does not reap an expired sandbox; a controller that comes back does", async () => {
    const created = await manager.app.inject({
      method: "POST",
      url: "/v1/sandboxes",
      headers: auth("alice"),
      payload: { size: "small", ttlSeconds: 2 },
    });
    expect(created.statusCode, created.body).toBe(201);
    const id: string = created.json().id;
    const exists = async () =>
      (await manager.app.inject({ method: "GET", url: `/v1/sandboxes/${id}`, headers: auth("alice") })).statusCode ===
      200;
    // the manager's reaper passes every 500 ms: past the TTL it would have deleted it within these 5 s
    await new Promise((r) => setTimeout(r, 5_000));
    expect(await exists()).toBe(true);
    [controller] = await startRole("controller", "ctl-2", kcs.controller!);
    await waitFor("the controller reaped the expired sandbox", async () => !(await exists()), 60_000);
  }, 120_000);
});
