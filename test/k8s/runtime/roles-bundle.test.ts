// The deployed entry: `node runtime.mjs controller` and `node runtime.mjs manager`, the esbuild
// bundle of runtime/main.ts that the Deployments run (components/runtime/bundle.ts), as real
// processes against the test control plane, configured the way the pods are: SBX_CONFIG, the
// role argument, POD_NAME. The controller leads under its pod name and serves no API; the
// manager serves the API; SIGTERM stops both and the leader hands the Lease back.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildRuntimeCode } from "../../../components/runtime/bundle.ts";
import { type RuntimeConfig, type RuntimeConfigInput, validateRuntimeConfig } from "../../../runtime/config/schema.ts";
import { hashToken } from "../../../runtime/core/tokens.ts";
import { isNotFound, type KubeClients } from "../../../runtime/k8s/client.ts";
import { waitFor } from "../../support/cluster.ts";
import { TOKENS } from "../../support/local.ts";
import {
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  type TestNamespaces,
  testKubeconfigPath,
} from "./support.ts";

const repo = resolve(import.meta.dirname, "../../..");
let dir: string;
let admin: KubeClients;
let ns: TestNamespaces;
let config: RuntimeConfig;
const procs: { child: ChildProcess; url: Promise<string>; exited: Promise<number | null>; stderr: () => string }[] = [];

/** Runs the bundle like the pod does; resolves its URL from the "listening" log line (port 0). */
function startBundle(role: string, podName: string) {
  const child = spawn(process.execPath, [join(dir, "runtime.mjs"), role], {
    cwd: dir,
    env: { ...process.env, SBX_CONFIG: join(dir, "config.json"), SBX_ROLE: role, POD_NAME: podName },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stdout!.on("error", () => undefined);
  child.stderr!.on("error", () => undefined);
  child.stdout!.resume();
  const exited = new Promise<number | null>((done) => child.on("exit", (code) => done(code)));
  const url = new Promise<string>((found, fail) => {
    child.stderr!.on("data", (c: Buffer) => {
      stderr += c.toString();
      const m = /"url":"(http:[^"]+)"[^\n]*"msg":"sbx control plane listening"/.exec(stderr);
      if (m) found(m[1]);
    });
    child.on("error", fail);
    void exited.then((code) => fail(new Error(`runtime.mjs ${role} exited ${code} before listening:\n${stderr}`)));
  });
  const p = { child, url, exited, stderr: () => stderr };
  procs.push(p);
  return p;
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

beforeAll(async () => {
  const kubeconfigPath = await testKubeconfigPath();
  admin = adminClients(kubeconfigPath);
  await installSandboxCrd(admin.kc);
  ns = await freshNamespaces(admin.core, "rt-bundle");
  dir = mkdtempSync(join(tmpdir(), "sbx-roles-bundle-"));
  // the code bundleRuntime packs into the ConfigMap (its size budget is test/infra/runtime.test.ts's concern)
  writeFileSync(join(dir, "runtime.mjs"), buildRuntimeCode(join(repo, "runtime/main.ts")));
  writeFileSync(join(dir, "tokens.json"), JSON.stringify({ [hashToken(TOKENS.alice)]: "alice" }));
  // the config document as the ConfigMap holds it (the schema's input form)
  const doc = {
    platform: "kubernetes",
    listen: { host: "127.0.0.1", port: 0 },
    catalog: { base: "registry.local/sbx/base:1" },
    tokensPath: join(dir, "tokens.json"),
    warmPool: [{ profile: "base", size: "nano", count: 1 }],
    kubernetes: { namespace: ns.sandboxes, runtimeNamespace: ns.runtime, leaseName: "sbx-controller", kubeconfigPath },
  } satisfies RuntimeConfigInput;
  config = validateRuntimeConfig(doc);
  writeFileSync(join(dir, "config.json"), JSON.stringify(doc));
}, 120_000);

afterAll(async () => {
  for (const p of procs) if (p.child.exitCode === null) p.child.kill("SIGKILL");
  await Promise.all(procs.map((p) => p.exited));
  await ns?.cleanup();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("the bundled runtime, by role", () => {
  it("controller: leads under its pod name, fills the pool, serves probes only; manager: serves the API", async () => {
    const ctl = startBundle("controller", "sbx-controller-abc12");
    const mgr = startBundle("manager", "sbx-manager-def34");
    const [ctlUrl, mgrUrl] = await Promise.all([ctl.url, mgr.url]);
    expect(ctl.stderr()).toContain('"role":"controller"');
    expect(mgr.stderr()).toContain('"role":"manager"');

    expect((await fetch(`${ctlUrl}/readyz`)).status).toBe(200);
    const refused = await fetch(`${ctlUrl}/v1/pool`, { headers: { authorization: `Bearer ${TOKENS.alice}` } });
    expect(refused.status).toBe(404);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("not_found");
    await waitFor(
      "the bundled controller holds the Lease",
      async () => (await leaseHolder()) === "sbx-controller-abc12",
    );

    expect((await fetch(`${mgrUrl}/readyz`)).status).toBe(200);
    await waitFor(
      "the manager reports the pool the controller filled",
      async () => {
        const r = await fetch(`${mgrUrl}/v1/pool`, { headers: { authorization: `Bearer ${TOKENS.alice}` } });
        const body = (await r.json()) as { pools: { ready: number }[] };
        return r.status === 200 && body.pools[0]?.ready === 1;
      },
      90_000,
    );
    expect(await leaseHolder()).toBe("sbx-controller-abc12");

    ctl.child.kill("SIGTERM");
    mgr.child.kill("SIGTERM");
    expect(await ctl.exited).toBe(0);
    expect(await mgr.exited).toBe(0);
    expect(await leaseHolder()).toBe(""); // released on the way out: a successor need not wait
  }, 180_000);
});
