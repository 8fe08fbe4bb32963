// The platform as deployed (issue 16, docs/deploy.md "The deploy suite"): the real Pulumi
// engine deploys the local stack onto the test control plane with its awaits on, the deployed
// runtime serves the CLI and the real e2b SDK (e2b.ts) through a port-forward, a second `up`
// is a no-op, a new runtime bundle and a new budget roll both Deployments without losing a
// sandbox, the policy pack runs in the engine, and `destroy` leaves nothing. One up…destroy cycle; the steps run in order.
// Over 400 lines on purpose: it is one ordered story whose steps share the deployed stack; its
// helpers (port-forward, CLI, diagnosis) are already in support.ts.
// Over 400 lines on purpose: one real `pulumi up` (minutes) is shared by every section; split
// files would each deploy again.
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  ApiException,
  AppsV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  KubernetesObjectApi,
  type V1Pod,
} from "@kubernetes/client-node";
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from "vitest";
import { bundleRuntime } from "../../../components/runtime/bundle.ts";
import { LEASE_NAME } from "../../../components/runtime/config.ts";
import { ANNOTATION_RUNTIME_SHA, NAMES, renderRbac } from "../../../components/runtime/render.ts";
import { LAYER_REGISTRY } from "../../../components/shared/k8s.ts";
import { API_GROUP, API_VERSION, LABELS, POOL, SANDBOX_PLURAL } from "../../../runtime/k8s/contract.ts";
import { tokenKeyPair } from "../../../runtime/snapshot/registryToken.ts";
import { type DeployOptions, type DeployStack, openDeployStack } from "../../../tools/deploy/engine.ts";
import { locateEngine, REPO } from "../../../tools/deploy/paths.ts";
import { tokenRegistry, waitFor } from "../../support/cluster.ts";
import { layerCounts } from "../../support/metrics.ts";
import { expectLayersInSandboxRepository } from "../../support/tokenRegistry.ts";
import { e2bStory } from "./e2b.ts";
import {
  diagnose,
  type Forward,
  isReady,
  livePods,
  metricValue,
  portForward,
  runningForwards,
  sbx as runSbx,
  sandboxRecord,
  snapshotRecordOf,
  stopAllForwards,
} from "./support.ts";

const suffix = randomBytes(3).toString("hex");
const NS = { sandbox: `deploy-${suffix}-sandboxes`, runtime: `deploy-${suffix}-system` };
const STEP = 900_000; // a bound far above a normal step; the await timeout below fails first
const token = randomBytes(32).toString("hex");
const REAL_NODE = "sbx-system-0";
const NEXT_ENTRY = join(import.meta.dirname, "fixtures/runtime-next.ts");
const repoStackText = readFileSync(join(REPO, "stacks/Pulumi.local.yaml"), "utf8");
// snapshots go to the layer registry the platform deploys (sbx:snapshots.layerRegistry): the
// host's docker-registry serving the Deployment's pod, in `auth: token` mode with the boot's
// token pair, so each sandbox pod pushes and pulls its own layers at that pod's address with a
// token for its own repository alone
const tokens = tokenRegistry();
const tokenKeyPem = readFileSync(tokens.keyFile, "utf8");
const SNAPSHOT_REPOSITORY = LAYER_REGISTRY.repository;

interface ObjectRef {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
}

let kc: KubeConfig;
let core: CoreV1Api;
let objects: KubernetesObjectApi;
let workDir: string;
let kubeconfigText: string;
let stack: DeployStack | undefined;
let failed = false;
let deployed: ObjectRef[] = [];
let manager: Forward | undefined;
const results: unknown[] = [];
/** the bundle the roll step deploys; later steps keep it */
let next: ReturnType<typeof bundleRuntime> | undefined;
/** sandboxes the suite made, by role in the story */
const ids: { cycled?: string; warm?: string } = {};
/** sha256 of the file each sandbox holds in /workspace/in/data.bin */
const sums: Record<string, string> = {};

function options(over: Partial<DeployOptions> = {}, budgetCpu = "4"): DeployOptions {
  return {
    workDir: join(workDir, "work"),
    kubeconfig: kubeconfigText,
    apiTokens: { alice: token },
    stackName: "deploy-suite",
    config: {
      namespaces: NS,
      runtime: { managerReplicas: 1, controllerReplicas: 2, cpu: "200m", memory: "256Mi" },
      budget: { cpu: budgetCpu, memory: "8Gi" },
      snapshots: {
        registryToken: {
          certificate: readFileSync(tokens.certFile, "utf8"),
          issuer: tokens.issuer,
          service: tokens.service,
        },
        // the test kubelet runs the host's binary for any image; an emptyDir as no volume provisioner runs here
        layerRegistry: { binary: "/usr/bin/docker-registry", storage: { kind: "emptyDir", sizeLimit: "4Gi" } },
      },
    },
    secrets: { registryTokenKey: tokenKeyPem },
    // awaits on (the default): `up` returns once the Deployments are Ready by the real probes.
    // Bounded, so pods that never get Ready fail the step with time left to show why.
    awaitTimeoutSeconds: 180,
    ...over,
  };
}

/** A step of the cycle: skipped once one before it failed (each builds on the last). */
function step(ctx: { skip: () => never }, fn: () => Promise<void>): Promise<void> {
  if (failed) ctx.skip();
  return explained(fn);
}

/** Runs a step; a failure carries what the runtime pods were doing and their logs. */
async function explained<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    const why = await diagnose(kc, NS.runtime);
    if (err instanceof Error) {
      err.message = `${err.message}\n${why}`;
      throw err;
    }
    throw new Error(`${String(err)}\n${why}`);
  }
}

const sbx = (args: string[]) => runSbx(manager!.url, token, args, workDir);

/** A CLI call that must succeed; its stderr is the failure message otherwise. */
async function ok(args: string[]): Promise<string> {
  const r = await sbx(args);
  if (r.code !== 0) throw new Error(`sbx ${args.join(" ")} exited ${r.code}: ${r.stderr}${r.stdout}`);
  return r.stdout;
}

/** The sha256 of /workspace/in/data.bin inside the sandbox, read by exec. */
async function sumInside(id: string): Promise<string> {
  return (await ok(["run", id, "--", "sha256sum", "/workspace/in/data.bin"])).split(" ")[0];
}

/** Copies a fresh random file into the sandbox's /workspace/in and remembers its sha256. */
async function putFile(id: string): Promise<void> {
  const dir = join(workDir, `in-${id}`, "in");
  mkdirSync(dir, { recursive: true });
  const data = randomBytes(256 * 1024);
  writeFileSync(join(dir, "data.bin"), data);
  sums[id] = createHash("sha256").update(data).digest("hex");
  await ok(["cp", dir, `${id}:/workspace`]);
  expect(await sumInside(id)).toBe(sums[id]);
}

async function objectsInState(s: DeployStack): Promise<ObjectRef[]> {
  return (await s.exportState())
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

async function leaseHolder(): Promise<string | undefined> {
  const lease = await kc
    .makeApiClient(CoordinationV1Api)
    .readNamespacedLease({ name: LEASE_NAME, namespace: NS.runtime });
  return lease.spec?.holderIdentity ?? undefined;
}

/**
 * Both Deployments fully rolled out: the controller saw the current spec, every replica is
 * updated, available and Ready, and no pod of an older ReplicaSet is left. Pulumi's await has
 * returned by then, but an old pod may still be on its way out: that is waited for here.
 */
async function rolledOut(): Promise<Record<string, V1Pod[]>> {
  const apps = kc.makeApiClient(AppsV1Api);
  const out: Record<string, V1Pod[]> = {};
  for (const [name, replicas] of [
    [NAMES.manager, 1],
    [NAMES.controller, 2],
  ] as const) {
    let last = "";
    await waitFor(`${name} rolled out (${replicas} replicas)`, async () => {
      const d = await apps.readNamespacedDeployment({ name, namespace: NS.runtime });
      const s = d.status ?? {};
      const pods = await livePods(kc, NS.runtime, name);
      last = JSON.stringify({ ...s, conditions: undefined, pods: pods.length });
      out[name] = pods;
      return (
        d.spec?.replicas === replicas &&
        s.observedGeneration === d.metadata?.generation &&
        s.replicas === replicas &&
        s.updatedReplicas === replicas &&
        s.readyReplicas === replicas &&
        s.availableReplicas === replicas &&
        pods.length === replicas &&
        pods.every(isReady)
      );
    }).catch((err) => {
      throw new Error(`${err instanceof Error ? err.message : err}; last status ${last}`);
    });
  }
  return out;
}

/** http://<pod ip>:<port> of the layer registry's Ready pod (the host reaches pod addresses). */
async function layerRegistryAt(): Promise<string> {
  let at = "";
  await waitFor("the layer registry's pod Ready", async () => {
    const [pod] = (await livePods(kc, NS.runtime, LAYER_REGISTRY.name)).filter(isReady);
    at = pod?.status?.podIP ? `http://${pod.status.podIP}:${LAYER_REGISTRY.port}` : "";
    return !!at;
  });
  return at;
}

/** The controller that holds the Lease is one of the live controller pods (it may change hands). */
async function expectOneLeader(controllers: V1Pod[]): Promise<void> {
  const names = controllers.map((p) => p.metadata!.name!);
  await waitFor("a live controller pod holds the Lease", async () => names.includes((await leaseHolder()) ?? ""));
  expect(names).toContain(await leaseHolder());
}

/**
 * The manager's whole admission budget (cpu, millis) as its /metrics reports it. Not used + free:
 * with budget shares on (the deployed default) those are this replica's share, which is the
 * budget less what other replicas, live or rolled away, hold.
 */
async function budgetCpuMillis(url: string): Promise<number | undefined> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return metricValue(text, 'sbx_budget_total{resource="cpu_millis"}');
}

async function forwardToManager(): Promise<Forward> {
  await manager?.stop();
  const [pod] = (await livePods(kc, NS.runtime, NAMES.manager)).filter(isReady);
  manager = await portForward(NS.runtime, `pod/${pod.metadata!.name}`, 8080);
  expect((await fetch(`${manager.url}/readyz`)).status).toBe(200);
  return manager;
}

async function sandboxRecords(): Promise<string[]> {
  const list = (await kc.makeApiClient(CustomObjectsApi).listNamespacedCustomObject({
    group: API_GROUP,
    version: API_VERSION,
    namespace: NS.sandbox,
    plural: SANDBOX_PLURAL,
  })) as { items: { metadata: { name: string } }[] };
  return list.items.map((i) => i.metadata.name);
}

beforeAll(async () => {
  locateEngine(); // a missing engine fails here, saying how to build it
  kc = new KubeConfig();
  kc.loadFromFile(inject("kubeconfigPath"));
  core = kc.makeApiClient(CoreV1Api);
  objects = KubernetesObjectApi.makeApiClient(kc);
  kubeconfigText = readFileSync(inject("kubeconfigPath"), "utf8");
  workDir = mkdtempSync(join(tmpdir(), "sbx-deploy-suite-"));
  stack = await openDeployStack(options());
}, STEP);

afterEach((ctx) => {
  if (ctx.task.result?.state === "fail") failed = true;
});

afterAll(async () => {
  await stopAllForwards();
  // a failed run must not leave the platform on the shared test cluster
  if (stack && failed) await stack.destroy().catch((err) => console.error(`deploy suite: destroy failed: ${err}`));
  await stack?.close();
  if (!workDir) return;
  if (!failed) rmSync(workDir, { recursive: true, force: true });
  else console.error(`deploy suite: engine state and log kept in ${workDir}`);
}, STEP);

describe("the platform as deployed by the real engine", () => {
  it(
    "up creates every object, rolls out both Deployments on real probes, and one controller leads",
    (ctx) =>
      step(ctx, async () => {
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
        const inRuntime = (...names: string[]) => names.map((n) => `${NS.runtime}/${n}`).sort();
        expect(kinds("Deployment")).toEqual(inRuntime(NAMES.controller, LAYER_REGISTRY.name, NAMES.manager));
        expect(kinds("Service")).toEqual(inRuntime(LAYER_REGISTRY.name, NAMES.manager));
        expect(kinds("Secret")).toEqual(inRuntime(LAYER_REGISTRY.name, NAMES.tokens, NAMES.registryToken));
        expect(kinds("ConfigMap")).toEqual(
          expect.arrayContaining([`${NS.runtime}/${NAMES.catalog}`, `${NS.runtime}/${NAMES.config}`]),
        );
        expect(kinds("ConfigMap").some((c) => c.startsWith(`${NS.runtime}/${NAMES.bundlePrefix}`))).toBe(true);
        expect(kinds("PodDisruptionBudget")).toHaveLength(2);
        expect(kinds("ResourceQuota")).toEqual([`${NS.sandbox}/sandbox-budget`]);
        expect(kinds("LimitRange")).toEqual([`${NS.sandbox}/sandbox-defaults`]);
        expect(kinds("NetworkPolicy")).toEqual(expect.arrayContaining([`${NS.sandbox}/default-deny`]));
        const rbac = renderRbac(NS.runtime, NS.sandbox);
        for (const k of ["ServiceAccount", "Role", "RoleBinding"]) {
          const want = rbac.filter((o) => o.kind === k).map((o) => `${o.metadata.namespace}/${o.metadata.name}`);
          if (k === "ServiceAccount") want.push(...inRuntime(LAYER_REGISTRY.name)); // it runs with no API token
          expect(kinds(k)).toEqual(want.sort());
        }
        const missing: string[] = [];
        for (const o of deployed) if (!(await exists(o))) missing.push(label(o));
        expect(missing).toEqual([]);

        // the awaits returned: both Deployments are Ready as the kubelet's real probes judged them
        const pods = await rolledOut();
        for (const p of [...pods[NAMES.manager], ...pods[NAMES.controller]]) {
          expect(isReady(p), p.metadata!.name).toBe(true);
          expect(p.spec?.nodeName).toBe(REAL_NODE);
          expect(p.status?.podIP).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
        }
        await expectOneLeader(pods[NAMES.controller]);
        // the layer registry: Ready on its port, and nothing for anyone without a token
        const url = await layerRegistryAt();
        expect((await fetch(`${url}/v2/`)).status).toBe(401);
      }),
    STEP,
  );

  it(
    "the deployed manager serves the CLI; sandboxes run on sandbox nodes; the controller filled the pool",
    (ctx) =>
      step(ctx, async () => {
        await forwardToManager();
        expect(await budgetCpuMillis(manager!.url)).toBe(4000);

        // the pool the deployed controller filled, before any claim (the manager never refills)
        let pool: V1Pod[] = [];
        await waitFor(
          "the warm pool's 2 pods Running",
          async () => {
            pool = (
              await core.listNamespacedPod({ namespace: NS.sandbox, labelSelector: `${LABELS.pool}=${POOL.warm}` })
            ).items.filter((p) => p.status?.phase === "Running");
            return pool.length === 2;
          },
          120_000,
        );
        const poolNames = pool.map((p) => p.metadata!.name!);

        // a cold sandbox through the whole lifecycle
        const id = JSON.parse(await ok(["create", "--profile", "base", "--size", "small", "--json"])).id as string;
        ids.cycled = id;
        await ok(["wait", id, "--timeout", "120s"]);
        expect(await ok(["run", id, "--", "echo", "hello from the deployed manager"])).toBe(
          "hello from the deployed manager\n",
        );
        // over the command channel: the bundle carried the helper into the manager's pod
        expect(JSON.parse(await ok(["get", id, "--json"])).commandChannel).toBe("helper");
        await putFile(id);
        await ok(["cp", `${id}:/workspace/in`, join(workDir, `out-${id}`)]);
        const back = readFileSync(join(workDir, `out-${id}`, "in", "data.bin"));
        expect(createHash("sha256").update(back).digest("hex")).toBe(sums[id]);
        const cold = await core.readNamespacedPod({ name: id, namespace: NS.sandbox });
        expect(cold.spec?.nodeName).toMatch(/^sbx-sandbox-/);
        expect(cold.spec?.nodeName).not.toBe(REAL_NODE);
        await ok(["pause", id]);
        expect(JSON.parse(await ok(["get", id, "--json"])).phase).toBe("Paused");
        // the pod moved its layers, in its own repository with its own token
        const { snapshot } = await snapshotRecordOf(kc, NS.sandbox, id);
        expect(snapshot?.repository).toBe(SNAPSHOT_REPOSITORY);
        await expectLayersInSandboxRepository(snapshot, id, await layerRegistryAt());
        const counts = layerCounts(await (await fetch(`${manager!.url}/metrics`)).text());
        expect(counts.podPush).toBeGreaterThan(0);
        expect(counts.replicaPush).toBe(0);
        await ok(["resume", id]);
        await ok(["wait", id, "--timeout", "120s"]);
        expect(await sumInside(id)).toBe(sums[id]);
        // it stays paused through the roll below
        await ok(["pause", id]);

        // a warm claim is served by one of the pods the controller put in the pool
        const warm = JSON.parse(await ok(["create", "--profile", "base", "--size", "nano", "--json"])).id as string;
        ids.warm = warm;
        await ok(["wait", warm, "--timeout", "120s"]);
        const got = JSON.parse(await ok(["get", warm, "--json"]));
        expect(got.warm).toBe(true);
        const record = await sandboxRecord(kc, NS.sandbox, warm);
        expect(poolNames).toContain(record.spec?.podName);
        const warmPod = await core.readNamespacedPod({ name: String(record.spec?.podName), namespace: NS.sandbox });
        expect(warmPod.spec?.nodeName).not.toBe(REAL_NODE);
        await putFile(warm);

        // the role split: a controller pod serves probes and metrics, and no sandbox API
        const [ctl] = await livePods(kc, NS.runtime, NAMES.controller);
        const fwd = await portForward(NS.runtime, `pod/${ctl.metadata!.name}`, 8080);
        try {
          expect((await fetch(`${fwd.url}/readyz`)).status).toBe(200);
          const refused = await fetch(`${fwd.url}/v1/sandboxes`, { headers: { authorization: `Bearer ${token}` } });
          expect(refused.status).toBe(404);
          expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("not_found");
        } finally {
          await fwd.stop();
        }
      }),
    STEP,
  );

  it(
    "the real e2b SDK against the deployed runtime: commands, every file call, missing paths, pause, connect",
    (ctx) => step(ctx, () => e2bStory({ url: manager!.url, apiKey: token })),
    STEP,
  );

  it(
    "a second up changes nothing",
    (ctx) =>
      step(ctx, async () => {
        const changes = await stack!.up();
        results.push(changes);
        expect(changes.changed).toBe(0);
        expect(changes.ops.same).toBeGreaterThan(deployed.length);
      }),
    STEP,
  );

  it(
    "a new runtime bundle and budget roll both Deployments; the new pods serve; no sandbox is lost",
    (ctx) =>
      step(ctx, async () => {
        const before = await rolledOut();
        const oldPods = new Set([...before[NAMES.manager], ...before[NAMES.controller]].map((p) => p.metadata!.name));
        const oldSha = before[NAMES.manager][0].metadata?.annotations?.[ANNOTATION_RUNTIME_SHA];
        expect(oldSha).toMatch(/^[0-9a-f]{64}$/);
        next = bundleRuntime(NEXT_ENTRY);
        expect(next.sha256).not.toBe(oldSha);

        await manager?.stop(); // its pod is about to go
        await stack!.close();
        stack = await openDeployStack(options({ bundle: () => next! }, "6"));
        const changes = await stack.up();
        results.push(changes);
        expect(changes.changed).toBeGreaterThan(0);

        const after = await rolledOut();
        for (const p of [...after[NAMES.manager], ...after[NAMES.controller]]) {
          expect(oldPods.has(p.metadata!.name), `${p.metadata!.name} is a new pod`).toBe(false);
          expect(p.metadata?.annotations?.[ANNOTATION_RUNTIME_SHA]).toBe(next.sha256);
          expect(isReady(p)).toBe(true);
          const log = await core.readNamespacedPodLog({
            name: p.metadata!.name!,
            namespace: NS.runtime,
            container: p.spec!.containers[0].name,
          });
          expect(log, `${p.metadata!.name} runs the new bundle`).toContain("runtime-next bundle");
        }
        await expectOneLeader(after[NAMES.controller]);

        // the new manager serves, with the new budget
        await forwardToManager();
        expect(await budgetCpuMillis(manager!.url)).toBe(6000);

        // every sandbox made before the roll is still there and usable
        const listed = (JSON.parse(await ok(["ls", "--json"])) as { id: string }[]).map((s) => s.id);
        expect(listed).toEqual(expect.arrayContaining([ids.cycled, ids.warm]));
        const warm = ids.warm!;
        expect(JSON.parse(await ok(["get", warm, "--json"])).phase).toBe("Running");
        expect(await sumInside(warm)).toBe(sums[warm]);
        await ok(["pause", warm]);
        await ok(["resume", warm]);
        await ok(["wait", warm, "--timeout", "120s"]);
        expect(await sumInside(warm)).toBe(sums[warm]);
        await putFile(warm);

        const paused = ids.cycled!;
        expect(JSON.parse(await ok(["get", paused, "--json"])).phase).toBe("Paused");
        await ok(["resume", paused]);
        await ok(["wait", paused, "--timeout", "120s"]);
        expect(await sumInside(paused)).toBe(sums[paused]);
        expect(await ok(["run", paused, "--", "echo", "after the roll"])).toBe("after the roll\n");
      }),
    STEP,
  );

  it(
    "preview runs our policy pack inside the engine",
    (ctx) =>
      step(ctx, async () => {
        const result = await stack!.preview({ policyPacks: [join(REPO, "policy")] });
        results.push(result);
        expect(result.policyPacks).toEqual({ "sbx-security": expect.any(String) });
        expect(result.violations).toEqual([]);
        expect(result.changed).toBe(0);
      }),
    STEP,
  );

  it(
    "a registry token key that is not the certificate's fails preview, naming the setting, not the key",
    (ctx) =>
      step(ctx, async () => {
        const wrong = tokenKeyPair({ now: new Date(), commonName: "not the registry's" }).keyPem;
        await stack!.close();
        stack = await openDeployStack(options({ bundle: () => next!, secrets: { registryTokenKey: wrong } }, "6"));
        const err = await stack.preview().then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(Error);
        const message = (err as Error).message;
        expect(message).toMatch(/sbx:registryTokenKey.*is not the key of sbx:snapshots.registryToken.certificate/);
        for (const l of wrong.split("\n").filter((x) => x && !x.startsWith("-----"))) expect(message).not.toContain(l);
        // the stack as it was, for the steps after
        await stack.close();
        stack = await openDeployStack(options({ bundle: () => next! }, "6"));
        const again = await stack.preview();
        expect(again.changed).toBe(0);
      }),
    STEP,
  );

  it(
    "kill, then destroy removes every object and both namespaces, none stuck on a finalizer",
    (ctx) =>
      step(ctx, async () => {
        expect(ids.cycled && ids.warm, "the sandboxes of the steps before").toBeTruthy();
        for (const id of [ids.cycled!, ids.warm!]) {
          await ok(["kill", id]);
          expect((await sbx(["get", id])).code).toBe(4); // not found
        }
        await waitFor("the killed sandboxes' records to be gone", async () => (await sandboxRecords()).length === 0);
        await manager?.stop();
        expect(runningForwards()).toBe(0);

        const changes = await stack!.destroy();
        results.push(changes);
        expect(changes.ops.delete).toBeGreaterThan(deployed.length);
        expect(await objectsInState(stack!)).toEqual([]);
        const left = async () => {
          const out: string[] = [];
          for (const o of deployed) if (await exists(o)) out.push(label(o));
          return out;
        };
        await waitFor("every deployed object to be gone", async () => (await left()).length === 0).catch(
          () => undefined,
        );
        expect(await left()).toEqual([]);
        for (const name of [NS.runtime, NS.sandbox])
          expect(await exists({ apiVersion: "v1", kind: "Namespace", metadata: { name } })).toBe(false);
      }),
    STEP,
  );

  it("kept every secret out of the log and the results, and wrote only its own stack file copy", async (ctx) => {
    if (failed) ctx.skip();
    expect(results).toHaveLength(5);
    await stack!.close();
    const log = readFileSync(stack!.logFile, "utf8");
    expect(log).toContain("pulumi destroy");
    const secretLines = kubeconfigText
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => /-data:|token:/.test(l));
    expect(secretLines.length).toBeGreaterThan(0);
    const keyLines = tokenKeyPem.split("\n").filter((l) => l.length > 0 && !l.startsWith("-----"));
    expect(keyLines.length).toBeGreaterThan(0);
    for (const text of [log, JSON.stringify(results)]) {
      expect(text).not.toContain(token);
      for (const l of keyLines) expect(text).not.toContain(l);
      for (const l of secretLines) expect(text).not.toContain(l.replace(/^[\w-]+:\s*/, ""));
    }
    expect(readFileSync(join(REPO, "stacks/Pulumi.local.yaml"), "utf8")).toBe(repoStackText);
    const copy = readFileSync(join(workDir, "work", "Pulumi.deploy-suite.yaml"), "utf8");
    expect(copy).toMatch(/encryptionsalt: /);
    expect(copy).toMatch(/sbx:kubeconfig:\s+secure: /);
  });
});
