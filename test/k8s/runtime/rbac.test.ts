// An `all` process (both roles in one) runs with exactly the RBAC that runtime/k8s/contract.ts
// declares for the two deployed roles together (the rules the Pulumi package deploys),
// authenticated as a service account, and that is enough for the whole lifecycle, the warm
// pool and leader election. It is also not more: the same identity is refused outside those
// rules. test/k8s/runtime/roles.test.ts runs each role with its own rules alone.
import { CoreV1Api, type KubeConfig, RbacAuthorizationV1Api } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import type { SandboxSpec } from "../../../runtime/core/types.ts";
import type { KubernetesPlatform } from "../../../runtime/k8s/assemble.ts";
import type { KubernetesBackend } from "../../../runtime/k8s/backend.ts";
import { clientsFor, type KubeClients, PooledKubeConfig, statusCode } from "../../../runtime/k8s/client.ts";
import { type PolicyRule, roleRules } from "../../../runtime/k8s/contract.ts";
import { serviceAccountKubeConfig, waitFor } from "../../support/cluster.ts";
import {
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  type TestNamespaces,
  testConfig,
  testKubeconfigPath,
  testPlatform,
} from "./support.ts";

let admin: KubeClients;
let ns: TestNamespaces;
let config: RuntimeConfig;
let backend: KubernetesBackend;
let platform: KubernetesPlatform;
let saKc: KubeConfig;

async function grant(
  rbac: RbacAuthorizationV1Api,
  namespace: string,
  name: string,
  rules: PolicyRule[],
  saNamespace: string,
) {
  await rbac.createNamespacedRole({ namespace, body: { metadata: { name }, rules } });
  await rbac.createNamespacedRoleBinding({
    namespace,
    body: {
      metadata: { name },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
      subjects: [{ kind: "ServiceAccount", name: "sbx-manager", namespace: saNamespace }],
    },
  });
}

beforeAll(async () => {
  admin = adminClients(await testKubeconfigPath());
  await installSandboxCrd(admin.kc);
  ns = await freshNamespaces(admin.core, "rt-rbac");
  config = testConfig(ns, {
    warmPool: [{ profile: "base", size: "nano", count: 2 }],
    // the budget shares Lease too (runtime/k8s/budget), under the manager's runtime-namespace rules
    kubernetes: { budgetShares: { enabled: true, leaseSeconds: 3, tickMs: 200 } },
  });
  await admin.core.createNamespacedServiceAccount({
    namespace: ns.runtime,
    body: { metadata: { name: "sbx-manager" } },
  });
  const rbac = admin.kc.makeApiClient(RbacAuthorizationV1Api);
  const [m, c] = [
    roleRules("manager", config.kubernetes.leaseName),
    roleRules("controller", config.kubernetes.leaseName),
  ];
  await grant(rbac, ns.sandboxes, "sbx-manager", [...m.sandboxNamespace, ...c.sandboxNamespace], ns.runtime);
  await grant(rbac, ns.runtime, "sbx-manager-runtime", [...m.runtimeNamespace, ...c.runtimeNamespace], ns.runtime);
  const sa = await serviceAccountKubeConfig(admin.kc, ns.runtime, "sbx-manager");
  saKc = new PooledKubeConfig();
  saKc.loadFromString(sa.exportConfig());
  platform = testPlatform(config, clientsFor(saKc));
  backend = platform.backend;
  await backend.start();
  await waitFor(
    "leadership with the contract's Lease rules",
    async () => platform.testing.controller.isLeader(),
    20_000,
  );
  await waitFor(
    "a budget share written with the contract's rules",
    async () => !platform.testing.budgetShares!.ledger.fenced(),
  );
  // warm pods become this replica's to claim one phase (half the 3 s lease) after it first saw
  // itself in the shares (runtime/k8s/claims/partition.ts); before that a claim finds none
  await new Promise((r) => setTimeout(r, 2_000));
  // renewals (a JSON patch of its own entry, every 375 ms at this lease) kept landing meanwhile
  expect(platform.testing.budgetShares!.ledger.snapshot().renewedAgoMs).toBeLessThan(1_000);
});

afterAll(async () => {
  await backend?.close();
  await ns?.cleanup();
});

const spec = (id: string): SandboxSpec => ({
  id,
  owner: "rbac",
  image: { profile: "base", image: config.catalog.base },
  size: config.sizeClasses.nano,
  env: {},
  ttlSeconds: 600,
  idleTimeoutSeconds: 0,
  metadata: {},
  createdAt: new Date(),
});

describe("manager with exactly the contract's RBAC", () => {
  it("is not an admin: refused outside its rules", async () => {
    const core = saKc.makeApiClient(CoreV1Api);
    const err = await core.listNamespacedSecret({ namespace: ns.sandboxes }).catch((e) => e);
    expect(statusCode(err)).toBe(403);
    const err2 = await core.listNamespacedPod({ namespace: "default" }).catch((e) => e);
    expect(statusCode(err2)).toBe(403);
  });

  it("runs the lifecycle, fills and claims the warm pool, and records status", async () => {
    await backend.provision(spec("rbac-cold"));
    await backend.awaitReady("rbac-cold", { timeoutMs: 60_000 });
    const s = await backend.exec("rbac-cold", { command: ["sh", "-c", "echo ok > /workspace/f && cat /workspace/f"] });
    const out: Buffer[] = [];
    s.stdout.on("data", (c: Buffer) => out.push(c));
    expect((await s.result).exitCode).toBe(0);
    expect(Buffer.concat(out).toString()).toBe("ok\n");
    // a port through the API server's port-forward (pods/portforward create, get)
    const srv = await backend.exec("rbac-cold", {
      command: ["sh", "-c", "nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &"],
    });
    srv.stdout.resume();
    expect((await srv.result).exitCode).toBe(0);
    await waitFor("the port answers through port-forward", async () => {
      const sock = await backend.openPort!("rbac-cold", 8000);
      const got: Buffer[] = [];
      sock.on("data", (c: Buffer) => got.push(c));
      const ended = new Promise((r) => {
        sock.once("end", r);
        sock.once("error", r);
      });
      sock.write("GET / HTTP/1.0\r\n\r\n");
      await ended;
      sock.destroy();
      return Buffer.concat(got).toString().startsWith("HTTP/1.0 200");
    });
    const logs = await backend.logs("rbac-cold", {});
    logs.resume();
    await waitFor("status written (sandboxes/status)", async () => {
      const c = await admin.custom.getNamespacedCustomObject({
        group: "sbx.dev",
        version: "v1alpha1",
        namespace: ns.sandboxes,
        plural: "sandboxes",
        name: "rbac-cold",
      });
      return c.status?.phase === "Running";
    });
    await backend.touch("rbac-cold", new Date());
    await waitFor("pool filled", async () => (await backend.poolStatus!())[0].ready === 2, 60_000);
    const warm = await backend.claim(spec("rbac-warm"));
    expect(warm).toMatchObject({ ready: true, warm: true });
    await backend.delete("rbac-cold");
    await backend.delete("rbac-warm");
    await waitFor("both gone", async () => (await backend.list()).length === 0);
  });
});
