// Over 400 lines on purpose: every case reads the same rendered Deployments, roles and bundle
// (renderInput, one render per delivery), and split files would each repeat that fixture.

import { execFileSync, spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { gunzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import type { RuntimeSettings } from "../../components/runtime/args.ts";
import {
  BUNDLE_LIMIT_BYTES,
  BUNDLE_PART_BYTES,
  buildRuntimeCode,
  bundlePartKey,
  bundleRuntime,
  joinBundleParts,
  packBundle,
} from "../../components/runtime/bundle.ts";
import { buildRuntimeConfig, hashTokens, PATHS } from "../../components/runtime/config.ts";
import {
  ANNOTATION_RUNTIME_SHA,
  bundleConfigMapName,
  type RuntimeRenderInput,
  renderRuntime,
} from "../../components/runtime/render.ts";
import { DEFAULT_SIZE_CLASSES, validateRuntimeConfig } from "../../runtime/config/schema.ts";

const FIXTURE_ENTRY = fileURLToPath(new URL("./fixtures/entry.ts", import.meta.url));

const SETTINGS: RuntimeSettings = {
  sizeClasses: structuredClone(DEFAULT_SIZE_CLASSES) as RuntimeSettings["sizeClasses"],
  budget: { cpu: "110", memory: "400Gi" },
  defaults: {
    profile: "base",
    size: "nano",
    ttlSeconds: 3600,
    maxTtlSeconds: 86400,
    idleTimeoutSeconds: 900,
    finishedGraceSeconds: 60,
  },
  warmPool: [{ profile: "base", size: "nano", count: 10 }],
};

function renderInput(overrides: Partial<RuntimeRenderInput> = {}): RuntimeRenderInput {
  return {
    namespace: "sbx-system",
    sandboxNamespace: "sbx-sandboxes",
    delivery: { kind: "bundle", bundle: packBundle("console.log(1)"), nodeImage: "node:20-bookworm-slim" },
    managerReplicas: 2,
    controllerReplicas: 2,
    resources: { cpu: "500m", memory: "512Mi" },
    configJson: "{}",
    catalogJson: "{}",
    tokensJson: "{}",
    configSha: "0".repeat(64),
    ...overrides,
  };
}

describe("bundleRuntime", () => {
  it("bundles an entry and its npm dependencies into one runnable ESM file", () => {
    const bundle = bundleRuntime(FIXTURE_ENTRY);
    const code = gunzipSync(joinBundleParts(bundle));
    expect(createHash("sha256").update(code).digest("hex")).toBe(bundle.sha256);
    expect(bundle.bytes).toBe(code.length);
    expect(code.toString()).not.toMatch(/from\s*"zod"/); // zod is inside, not imported
    const dir = mkdtempSync(join(tmpdir(), "sbx-bundle-"));
    writeFileSync(join(dir, "runtime.mjs"), code);
    expect(
      execFileSync(process.execPath, [join(dir, "runtime.mjs"), "controller"], { cwd: dir, encoding: "utf8" }),
    ).toBe("sbx runtime fixture: controller\n");
  });

  it("the pod's unpack step and command run the bundle (paths relocated to a temp dir)", () => {
    const bundle = bundleRuntime(FIXTURE_ENTRY);
    const d = renderRuntime(
      renderInput({ delivery: { kind: "bundle", bundle, nodeImage: "node:20-bookworm-slim" } }),
    ).find((o) => o.kind === "Deployment" && o.metadata.name === "sbx-manager") as any;
    const dir = mkdtempSync(join(tmpdir(), "sbx-pod-"));
    mkdirSync(join(dir, "bundle"));
    mkdirSync(join(dir, "opt"));
    for (const [i, p] of bundle.parts.entries())
      writeFileSync(join(dir, "bundle", bundlePartKey(i)), Buffer.from(p, "base64"));
    const relocate = (arg: string) => arg.replaceAll("/bundle/", `${dir}/bundle/`).replaceAll("/opt/sbx", `${dir}/opt`);
    const [unpackBin, ...unpackArgs] = d.spec.template.spec.initContainers[0].command.map(relocate);
    expect(unpackBin).toBe("node");
    execFileSync(process.execPath, unpackArgs, { cwd: dir });
    const [bin, ...args] = d.spec.template.spec.containers[0].command.map(relocate);
    expect(bin).toBe("node");
    expect(execFileSync(process.execPath, args, { cwd: dir, encoding: "utf8" })).toBe("sbx runtime fixture: manager\n");
  });

  it("the real runtime/main.ts bundles under the ConfigMap budget and starts (reaches config loading)", () => {
    const bundle = bundleRuntime(fileURLToPath(new URL("../../runtime/main.ts", import.meta.url)));
    expect(bundle.gzBytes).toBeLessThan(BUNDLE_LIMIT_BYTES);
    const dir = mkdtempSync(join(tmpdir(), "sbx-real-"));
    writeFileSync(join(dir, "runtime.mjs"), gunzipSync(joinBundleParts(bundle)));
    const r = spawnSync(process.execPath, [join(dir, "runtime.mjs"), "manager"], {
      cwd: dir,
      encoding: "utf8",
      env: { ...process.env, SBX_CONFIG: join(dir, "missing.json") },
      timeout: 30_000,
    });
    // every module evaluated (no "Dynamic require" / missing module); it stops at our bad SBX_CONFIG
    expect(r.stderr).not.toMatch(/Dynamic require|Cannot find module|ERR_MODULE_NOT_FOUND/);
    expect(`${r.stdout}${r.stderr}`).toContain("SBX_CONFIG");
    expect(r.status).not.toBe(0);
  }, 60_000);

  it("the bundled entry reads the role argument the Deployment passes, and SBX_ROLE, as tsx does", () => {
    // the code bundleRuntime packs, without its ConfigMap size check (the test above has that)
    const dir = mkdtempSync(join(tmpdir(), "sbx-role-"));
    writeFileSync(
      join(dir, "runtime.mjs"),
      buildRuntimeCode(fileURLToPath(new URL("../../runtime/main.ts", import.meta.url))),
    );
    const run = (args: string[], env: Record<string, string> = {}) =>
      spawnSync(process.execPath, [join(dir, "runtime.mjs"), ...args], {
        cwd: dir,
        encoding: "utf8",
        // port 0 and a temp cwd: should a refusal break, the service it starts collides with nothing
        env: { ...process.env, SBX_CONFIG: "", SBX_ROLE: "", SBX_PORT: "0", ...env },
        timeout: 20_000,
      });
    const typo = run(["controler"]);
    expect(typo.status).toBe(1);
    expect(typo.stderr).toContain('role argument: invalid value "controler": use one of: all, manager, controller');
    const bad = run([], { SBX_ROLE: "worker" });
    expect(bad.status).toBe(1);
    expect(bad.stderr).toContain('SBX_ROLE: invalid value "worker"');
    // a split role on the default (local) platform is refused before anything starts
    const local = run(["controller"]);
    expect(local.status).toBe(1);
    expect(local.stderr).toContain('role: invalid value "controller": the local platform runs in one process');
  }, 60_000);

  it("fails naming esbuild's error for a missing entry", () => {
    expect(() => bundleRuntime("/nonexistent/main.ts")).toThrow(/Could not resolve/);
  });

  it("a code change changes the hash; a bundle over the ConfigMap budget is refused with the fix", () => {
    expect(packBundle("a").sha256).not.toBe(packBundle("b").sha256);
    // base64 of random bytes gzips to ~3/4 of its length: comfortably over the budget
    const incompressible = randomBytes(Math.ceil(BUNDLE_LIMIT_BYTES * 1.5)).toString("base64");
    expect(() => packBundle(incompressible)).toThrow("set sbx:runtime.image to a prebuilt runtime image instead");
  });

  it("a bundle bigger than one ConfigMap is cut into parts the pod's unpack step joins again", () => {
    // ~2.4 parts of incompressible text behind a line that prints, so the joined file must run
    const filler = randomBytes(Math.ceil(BUNDLE_PART_BYTES * 2.4)).toString("base64");
    const bundle = packBundle(`console.log("joined"); // ${filler}`);
    expect(bundle.parts.length).toBe(3);
    for (const p of bundle.parts) expect(Buffer.from(p, "base64").length).toBeLessThanOrEqual(BUNDLE_PART_BYTES);
    const objects = renderRuntime(renderInput({ delivery: { kind: "bundle", bundle, nodeImage: "node:20" } }));
    const maps = objects.filter((o) => o.kind === "ConfigMap" && o.metadata.name.startsWith("sbx-runtime-")) as any[];
    expect(maps.map((m) => Object.keys(m.binaryData))).toEqual([
      [bundlePartKey(0)],
      [bundlePartKey(1)],
      [bundlePartKey(2)],
    ]);
    const d = objects.find((o) => o.kind === "Deployment" && o.metadata.name === "sbx-manager") as any;
    expect(d.spec.template.spec.volumes.find((v: any) => v.name === "bundle").projected.sources).toEqual(
      maps.map((m) => ({ configMap: { name: m.metadata.name } })),
    );
    const dir = mkdtempSync(join(tmpdir(), "sbx-parts-"));
    mkdirSync(join(dir, "bundle"));
    mkdirSync(join(dir, "opt"));
    for (const m of maps)
      for (const [key, b64] of Object.entries(m.binaryData as Record<string, string>))
        writeFileSync(join(dir, "bundle", key), Buffer.from(b64, "base64"));
    const relocate = (arg: string) => arg.replaceAll("/bundle/", `${dir}/bundle/`).replaceAll("/opt/sbx", `${dir}/opt`);
    const [, ...unpackArgs] = d.spec.template.spec.initContainers[0].command.map(relocate);
    execFileSync(process.execPath, unpackArgs, { cwd: dir });
    expect(execFileSync(process.execPath, [join(dir, "opt", "runtime.mjs")], { encoding: "utf8" })).toBe("joined\n");
    // a part missing from the volume fails the unpack step instead of writing broken code
    rmSync(join(dir, "bundle", bundlePartKey(1)));
    rmSync(join(dir, "opt", "runtime.mjs"));
    expect(() => execFileSync(process.execPath, unpackArgs, { cwd: dir, stdio: "pipe" })).toThrow(/ENOENT/);
  });
});

describe("runtime config.json", () => {
  const values = {
    settings: SETTINGS,
    namespace: "sbx-system",
    sandboxNamespace: "sbx-sandboxes",
    catalog: { base: "123456789012.dkr.ecr.us-east-1.amazonaws.com/sbx/sandbox-base:v1" },
    credentials: {
      baseRoleArn: "arn:aws:iam::123456789012:role/base",
      bucket: "b",
      region: "us-east-1",
      durationSeconds: 900,
    },
    snapshots: { repositoryUrl: "123456789012.dkr.ecr.us-east-1.amazonaws.com/sbx/snapshots", retentionDays: 7 },
  };

  it("passes the runtime's own validation with the mounted paths", () => {
    const cfg = validateRuntimeConfig(buildRuntimeConfig(values));
    expect(cfg.platform).toBe("kubernetes");
    expect(cfg.listen).toEqual({ host: "0.0.0.0", port: 8080 });
    expect(cfg.catalogPath).toBe(PATHS.catalog);
    expect(cfg.tokensPath).toBe(PATHS.tokens);
    expect(cfg.kubernetes).toEqual({
      namespace: "sbx-sandboxes",
      runtimeNamespace: "sbx-system",
      userNamespaces: false,
      leaseName: "sbx-controller",
      // several manager replicas: one budget, shared through a Lease (docs/kubernetes-runtime.md)
      budgetShares: { enabled: true, leaseSeconds: 15, tickMs: 500, headroomFraction: 0.1 },
    });
    expect(cfg.snapshots).toEqual({
      registry: "123456789012.dkr.ecr.us-east-1.amazonaws.com",
      repository: "sbx/snapshots",
      retentionDays: 7,
    });
    expect(cfg.budget).toEqual({ cpuMillis: 110_000, memoryBytes: 400 * 2 ** 30 });
  });

  it("sbx:runtime.userNamespaces reaches the runtime as kubernetes.userNamespaces", () => {
    const cfg = validateRuntimeConfig(
      buildRuntimeConfig({ ...values, settings: { ...SETTINGS, userNamespaces: true } }),
    );
    expect(cfg.kubernetes.userNamespaces).toBe(true);
  });

  it("a config the runtime would reject fails here", () => {
    const bad = { ...values, settings: { ...SETTINGS, warmPool: [{ profile: "base", size: "huge", count: 1 }] } };
    expect(() => buildRuntimeConfig(bad)).toThrow('config.warmPool[0].size: invalid value "huge"');
  });

  it("hashTokens maps sha256(token) to owner and refuses weak or shared tokens", () => {
    const token = "t".repeat(32);
    expect(hashTokens({ alice: token })).toEqual({ [createHash("sha256").update(token).digest("hex")]: "alice" });
    expect(() => hashTokens({ bob: "short" })).toThrow(
      'sbx:apiTokens.bob: invalid value "(secret)": use a random token of at least 16 characters',
    );
    expect(() => hashTokens({ a: token, b: token })).toThrow("same token as owner a");
  });
});

describe("renderRuntime", () => {
  const objects = renderRuntime(renderInput());
  const find = (kind: string, name: string) => objects.find((o) => o.kind === kind && o.metadata.name === name) as any;

  it("ships the CRD, and namespaced Roles only, with no wildcard verbs or resources", () => {
    const crd = find("CustomResourceDefinition", "sandboxes.sbx.dev");
    expect(crd.spec.group).toBe("sbx.dev");
    // a CRD an earlier install (or kubectl) applied is taken over, not a field conflict on `up`
    expect(crd.metadata.annotations["pulumi.com/patchForce"]).toBe("true");
    expect(objects.filter((o) => o.kind.startsWith("Cluster"))).toEqual([]);
    const roles = objects.filter((o) => o.kind === "Role") as any[];
    // the manager never leads: its runtime-namespace Role is for the budget shares Lease only
    expect(roles.map((r) => `${r.metadata.namespace}/${r.metadata.name}`).sort()).toEqual([
      "sbx-sandboxes/sbx-controller-sandboxes",
      "sbx-sandboxes/sbx-manager-sandboxes",
      "sbx-system/sbx-controller-runtime",
      "sbx-system/sbx-manager-runtime",
    ]);
    for (const r of roles) {
      for (const rule of r.rules) {
        expect(
          [...rule.verbs, ...rule.resources, ...rule.apiGroups].filter((v: string) => v.includes("*")),
          r.metadata.name,
        ).toEqual([]);
      }
    }
    const pods = find("Role", "sbx-manager-sandboxes").rules.find((r: any) => r.resources.includes("pods"));
    expect(pods.verbs).toEqual(["get", "list", "watch", "create", "patch", "delete"]);
    expect(find("RoleBinding", "sbx-manager-sandboxes").subjects).toEqual([
      { kind: "ServiceAccount", name: "sbx-manager", namespace: "sbx-system" },
    ]);
  });

  it("manager: replicas, probes, resources, hardened, bundle hash on the template", () => {
    const d = find("Deployment", "sbx-manager");
    const bundle = renderInput().delivery;
    if (bundle.kind !== "bundle") throw new Error("fixture");
    expect(d.spec.replicas).toBe(2);
    const c = d.spec.template.spec.containers[0];
    expect(c.readinessProbe.httpGet).toEqual({ path: "/readyz", port: "http" });
    expect(c.livenessProbe.httpGet).toEqual({ path: "/healthz", port: "http" });
    expect(c.resources).toEqual({ requests: { cpu: "500m", memory: "512Mi" }, limits: { memory: "512Mi" } });
    expect(c.securityContext).toMatchObject({
      runAsNonRoot: true,
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ["ALL"] },
    });
    expect(c.image).toBe("node:20-bookworm-slim");
    expect(c.command).toEqual(["node", "/opt/sbx/runtime.mjs", "manager"]);
    expect(d.spec.template.metadata.annotations[ANNOTATION_RUNTIME_SHA]).toBe(bundle.bundle.sha256);
    expect(d.spec.template.spec.volumes).toContainEqual({
      name: "bundle",
      projected: { sources: [{ configMap: { name: bundleConfigMapName(bundle.bundle.sha256, 0) } }] },
    });
    expect(find("PodDisruptionBudget", "sbx-manager").spec.minAvailable).toBe(1);
    expect(find("Service", "sbx-manager").spec.ports).toEqual([
      { name: "http", port: 80, targetPort: "http", protocol: "TCP" },
    ]);
  });

  it("controller runs the same code in the controller role, probed, with its pod name as Lease identity", () => {
    const d = find("Deployment", "sbx-controller");
    const c = d.spec.template.spec.containers[0];
    expect(c.command).toEqual(["node", "/opt/sbx/runtime.mjs", "controller"]);
    expect(c.env).toContainEqual({ name: "SBX_ROLE", value: "controller" });
    expect(c.env).toContainEqual({ name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } });
    expect(c.readinessProbe.httpGet).toEqual({ path: "/readyz", port: "http" });
    expect(c.livenessProbe.httpGet).toEqual({ path: "/healthz", port: "http" });
    expect(c.resources).toEqual({ requests: { cpu: "500m", memory: "512Mi" }, limits: { memory: "512Mi" } });
    // it serves no authenticated route: the tokens Secret is not mounted
    expect(d.spec.template.spec.volumes.map((v: any) => v.name)).not.toContain("tokens");
    expect(c.volumeMounts.map((m: any) => m.name)).not.toContain("tokens");
    const manager = find("Deployment", "sbx-manager").spec.template.spec;
    expect(manager.volumes.map((v: any) => v.name)).toContain("tokens");
  });

  it("RBAC per role: only the controller may touch the Lease, only the manager accepts creates and reads logs", () => {
    const rules = (name: string) => find("Role", name).rules as any[];
    const grants = (name: string, resource: string) =>
      rules(name)
        .filter((r) => r.resources.includes(resource))
        .flatMap((r) => r.verbs);
    expect(grants("sbx-controller-runtime", "leases").sort()).toEqual(["create", "get", "update"]);
    expect(rules("sbx-controller-runtime").find((r) => r.verbs.includes("update")).resourceNames).toEqual([
      "sbx-controller",
    ]);
    // the manager may touch the budget shares Lease and no other; the controller not that one
    expect(grants("sbx-manager-runtime", "leases").sort()).toEqual(["create", "get", "patch", "update"]);
    expect(rules("sbx-manager-runtime").find((r) => r.verbs.includes("update")).resourceNames).toEqual([
      "sbx-controller-shares",
    ]);
    expect(find("RoleBinding", "sbx-manager-runtime").subjects).toEqual([
      { kind: "ServiceAccount", name: "sbx-manager", namespace: "sbx-system" },
    ]);
    expect(grants("sbx-manager-sandboxes", "sandboxes")).toContain("create");
    expect(grants("sbx-controller-sandboxes", "sandboxes")).not.toContain("create");
    expect(grants("sbx-manager-sandboxes", "pods/log")).toEqual(["get"]);
    expect(grants("sbx-controller-sandboxes", "pods/log")).toEqual([]);
    // the port relay (runtime/k8s/ports.ts): the manager only, as exec (websocket upgrades)
    expect(grants("sbx-manager-sandboxes", "pods/portforward").sort()).toEqual(["create", "get"]);
    expect(grants("sbx-controller-sandboxes", "pods/portforward")).toEqual([]);
    for (const name of ["sbx-manager-sandboxes", "sbx-controller-sandboxes"])
      expect(grants(name, "pods/exec"), name).toEqual(["create", "get"]);
    expect(find("RoleBinding", "sbx-controller-runtime").subjects).toEqual([
      { kind: "ServiceAccount", name: "sbx-controller", namespace: "sbx-system" },
    ]);
  });

  it("a code change renames the bundle ConfigMap and changes the pod template (rolls the Deployments)", () => {
    const other = renderRuntime(
      renderInput({
        delivery: { kind: "bundle", bundle: packBundle("console.log(2)"), nodeImage: "node:20-bookworm-slim" },
      }),
    );
    const tpl = (objs: typeof objects) =>
      JSON.stringify((objs.find((o) => o.kind === "Deployment") as any).spec.template);
    expect(tpl(other)).not.toBe(tpl(objects));
    const names = (objs: typeof objects) => objs.filter((o) => o.kind === "ConfigMap").map((o) => o.metadata.name);
    expect(names(other)).not.toEqual(names(objects));
  });

  it("both roles run with glibc's mmap threshold fixed at 64 KiB, bundle or prebuilt image", () => {
    // what bench/k8s/scale.ts measured at 1,000 channels (docs/benchmarks.md); not a default to drop
    const image = renderRuntime(renderInput({ delivery: { kind: "image", image: "ghcr.io/acme/sbx-runtime:1.2.3" } }));
    for (const objs of [objects, image])
      for (const name of ["sbx-manager", "sbx-controller"]) {
        const d = objs.find((o) => o.kind === "Deployment" && o.metadata.name === name) as any;
        const env = d.spec.template.spec.containers[0].env;
        expect(env, name).toContainEqual({ name: "MALLOC_MMAP_THRESHOLD_", value: "65536" });
      }
  });

  it("both roles cap V8's old space at half the container's memory limit", () => {
    // V8 otherwise sizes the heap from the node's memory and lets garbage grow to 4x the live heap
    for (const [memory, cap] of [
      ["512Mi", "256"],
      ["1Gi", "512"],
      ["1536Mi", "768"],
    ]) {
      const objs = renderRuntime(renderInput({ resources: { cpu: "1", memory } }));
      for (const name of ["sbx-manager", "sbx-controller"]) {
        const d = objs.find((o) => o.kind === "Deployment" && o.metadata.name === name) as any;
        const c = d.spec.template.spec.containers[0];
        expect(c.env, `${name} at ${memory}`).toContainEqual({
          name: "NODE_OPTIONS",
          value: `--max-old-space-size=${cap}`,
        });
        expect(c.resources.limits.memory).toBe(memory);
      }
    }
  });

  it("a prebuilt image needs no bundle ConfigMap and no unpack step", () => {
    const objs = renderRuntime(
      renderInput({ delivery: { kind: "image", image: "ghcr.io/acme/sbx-runtime:1.2.3" }, managerReplicas: 1 }),
    );
    expect(objs.filter((o) => o.metadata.name.startsWith("sbx-runtime-"))).toEqual([]);
    const d = objs.find((o) => o.kind === "Deployment" && o.metadata.name === "sbx-manager") as any;
    expect(d.spec.template.spec.initContainers).toBeUndefined();
    expect(d.spec.template.spec.containers[0]).toMatchObject({
      image: "ghcr.io/acme/sbx-runtime:1.2.3",
      args: ["manager"],
    });
    expect(
      (objs.find((o) => o.kind === "PodDisruptionBudget" && o.metadata.name === "sbx-manager") as any).spec,
    ).toMatchObject({ maxUnavailable: 1 });
  });
});
