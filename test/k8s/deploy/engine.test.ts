// The real Pulumi engine (scripts/build-pulumi.sh) runs our program against the test control
// plane: `up` of the local stack creates every object the program declares, a second `up`
// changes nothing, our policy pack runs inside the engine, and `destroy` leaves no object and
// no namespace behind. The runtime pods are not waited on here (awaitPods: false).
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ApiException, KubeConfig, KubernetesObjectApi } from "@kubernetes/client-node";
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from "vitest";
import { NAMES, renderRbac } from "../../../components/runtime/render.ts";
import { type DeployStack, openDeployStack } from "../../../tools/deploy/engine.ts";
import { locateEngine, REPO } from "../../../tools/deploy/paths.ts";
import { waitFor } from "../../support/cluster.ts";

const suffix = randomBytes(3).toString("hex");
const NS = { sandbox: `deploy-${suffix}-sandboxes`, runtime: `deploy-${suffix}-system` };
const DEPLOY_TIMEOUT = 600_000;

interface ObjectRef {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
}

let workDir: string;
let stack: DeployStack | undefined;
let objects: KubernetesObjectApi;
let failed = false;
let deployed: ObjectRef[] = [];
let givenStackFile: string;
let givenStackText: string;
const repoStackText = readFileSync(join(REPO, "stacks/Pulumi.local.yaml"), "utf8");
const token = randomBytes(32).toString("hex");
let kubeconfigText: string;
/** every result the driver returned, to check none carries a secret */
const results: unknown[] = [];

/** The Kubernetes objects the engine's state says it manages: kind, namespace, name. */
async function objectsInState(s: DeployStack): Promise<ObjectRef[]> {
  const state = await s.exportState();
  return state
    .filter((r) => r.type.startsWith("kubernetes:") && r.type !== "pulumi:providers:kubernetes")
    .map((r) => ({
      apiVersion: r.outputs.apiVersion,
      kind: r.outputs.kind,
      metadata: { name: r.outputs.metadata.name, namespace: r.outputs.metadata.namespace || undefined },
    }));
}

async function exists(ref: ObjectRef): Promise<boolean> {
  try {
    await objects.read(ref);
    return true;
  } catch (err) {
    if (err instanceof ApiException && err.code === 404) return false;
    throw err;
  }
}

const label = (r: ObjectRef) => `${r.kind} ${r.metadata.namespace ?? ""}/${r.metadata.name}`;

beforeAll(async () => {
  locateEngine(); // a missing engine fails here, saying how to build it
  const kubeconfigPath = inject("kubeconfigPath");
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  objects = KubernetesObjectApi.makeApiClient(kc);
  workDir = mkdtempSync(join(tmpdir(), "sbx-deploy-"));
  // the driver is handed a stack file outside its work dir: it must never write to it
  givenStackFile = join(workDir, "given", "Pulumi.local.yaml");
  mkdirSync(join(workDir, "given"));
  writeFileSync(givenStackFile, repoStackText);
  givenStackText = repoStackText;
  kubeconfigText = readFileSync(kubeconfigPath, "utf8");
  stack = await openDeployStack({
    workDir: join(workDir, "work"),
    stackFile: givenStackFile,
    kubeconfig: kubeconfigText,
    apiTokens: { alice: token },
    stackName: "deploy-test",
    config: { namespaces: NS },
    // which objects exist is this file's question; whether the runtime pods run and pass
    // their probes is the deploy suite's (docs/deploy.md)
    awaitPods: false,
  });
}, DEPLOY_TIMEOUT);

afterEach((ctx) => {
  if (ctx.task.result?.state === "fail") failed = true;
});

afterAll(async () => {
  // a failed test must not leave the platform on the shared test cluster
  if (stack && failed) await stack.destroy().catch(() => undefined);
  await stack?.close();
  if (!workDir) return;
  if (!failed) rmSync(workDir, { recursive: true, force: true });
  else console.error(`deploy test: engine state and log kept in ${workDir}`);
}, DEPLOY_TIMEOUT);

describe("the real engine deploys the local stack", () => {
  it(
    "up creates every object of the program on the cluster",
    async () => {
      const changes = await stack!.up();
      results.push(changes);
      deployed = await objectsInState(stack!);
      expect(changes.ops.create).toBeGreaterThan(deployed.length); // plus the components and the provider

      const kinds = (k: string) =>
        deployed
          .filter((o) => o.kind === k)
          .map((o) => `${o.metadata.namespace ?? ""}/${o.metadata.name}`)
          .sort();
      expect(kinds("Namespace")).toEqual([`/${NS.runtime}`, `/${NS.sandbox}`].sort());
      expect(kinds("CustomResourceDefinition")).toEqual(["/sandboxes.sbx.dev"]);
      expect(kinds("Deployment")).toEqual([`${NS.runtime}/${NAMES.controller}`, `${NS.runtime}/${NAMES.manager}`]);
      expect(kinds("Service")).toEqual([`${NS.runtime}/${NAMES.manager}`]);
      expect(kinds("Secret")).toEqual([`${NS.runtime}/${NAMES.tokens}`]);
      expect(kinds("ConfigMap")).toEqual(
        expect.arrayContaining([`${NS.runtime}/${NAMES.catalog}`, `${NS.runtime}/${NAMES.config}`]),
      );
      // the runtime bundle, in one or more ConfigMaps
      expect(kinds("ConfigMap").some((c) => c.startsWith(`${NS.runtime}/${NAMES.bundlePrefix}`))).toBe(true);
      expect(kinds("PodDisruptionBudget")).toHaveLength(2);
      expect(kinds("ResourceQuota")).toEqual([`${NS.sandbox}/sandbox-budget`]);
      expect(kinds("LimitRange")).toEqual([`${NS.sandbox}/sandbox-defaults`]);
      expect(kinds("NetworkPolicy")).toEqual(expect.arrayContaining([`${NS.sandbox}/default-deny`]));
      const rbac = renderRbac(NS.runtime, NS.sandbox);
      for (const k of ["ServiceAccount", "Role", "RoleBinding"]) {
        const want = rbac.filter((o) => o.kind === k).map((o) => `${o.metadata.namespace}/${o.metadata.name}`);
        expect(kinds(k)).toEqual(want.sort());
      }

      // and each one is really there, as the API server stores it
      const missing: string[] = [];
      for (const o of deployed) if (!(await exists(o))) missing.push(label(o));
      expect(missing).toEqual([]);
    },
    DEPLOY_TIMEOUT,
  );

  it(
    "a second up changes nothing",
    async () => {
      const changes = await stack!.up();
      results.push(changes);
      expect(changes.changed).toBe(0);
      expect(changes.ops.same).toBeGreaterThan(deployed.length);
    },
    DEPLOY_TIMEOUT,
  );

  it(
    "preview runs our policy pack inside the engine",
    async () => {
      const result = await stack!.preview({ policyPacks: [join(REPO, "policy")] });
      results.push(result);
      expect(result.policyPacks).toEqual({ "sbx-security": expect.any(String) });
      expect(result.violations).toEqual([]);
      expect(result.changed).toBe(0);
    },
    DEPLOY_TIMEOUT,
  );

  it(
    "destroy removes every object and both namespaces, none stuck on a finalizer",
    async () => {
      expect(deployed.length).toBeGreaterThan(20);
      const changes = await stack!.destroy();
      results.push(changes);
      expect(changes.ops.delete).toBeGreaterThan(deployed.length);
      expect(await objectsInState(stack!)).toEqual([]);
      // the provider waits for a namespace to be gone; allow the API server a moment for the rest
      const left = async () => {
        const out: string[] = [];
        for (const o of deployed) if (await exists(o)) out.push(label(o));
        return out;
      };
      await waitFor("every deployed object to be gone", async () => (await left()).length === 0).catch(() => undefined);
      expect(await left()).toEqual([]);
    },
    DEPLOY_TIMEOUT,
  );

  it("kept every secret out of the log and the results, and wrote only its own stack file copy", async () => {
    expect(results).toHaveLength(4);
    await stack!.close();
    const log = readFileSync(stack!.logFile, "utf8");
    expect(log).toContain("pulumi destroy"); // the log is the engine's output, not empty
    const secretLines = kubeconfigText
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => /-data:|token:/.test(l));
    expect(secretLines.length).toBeGreaterThan(0);
    for (const text of [log, JSON.stringify(results)]) {
      expect(text).not.toContain(token);
      for (const l of secretLines) expect(text).not.toContain(l.replace(/^[\w-]+:\s*/, ""));
    }
    expect(readFileSync(givenStackFile, "utf8")).toBe(givenStackText);
    expect(readFileSync(join(REPO, "stacks/Pulumi.local.yaml"), "utf8")).toBe(repoStackText);
    // the copy is the one the CLI rewrote: it holds the salt and the encrypted secrets
    const copy = readFileSync(join(workDir, "work", "Pulumi.deploy-test.yaml"), "utf8");
    expect(copy).toMatch(/encryptionsalt: /);
    expect(copy).toMatch(/sbx:kubeconfig:\s+secure: /);
  });
});
