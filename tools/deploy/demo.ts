// `npm run demo:k8s`: the Kubernetes platform on one machine. Boots the test control plane
// (tools/control-plane/standalone.ts), deploys the local stack onto it with the real engine
// (engine.ts: a copy of stacks/Pulumi.local.yaml, a fresh token, the boot's registry for
// snapshots), waits for both Deployments, forwards a loopback port to the manager Service and
// prints how to use it. Ctrl-C, SIGTERM or the death of the npm running it stop everything in
// reverse order (demoStop.ts). Needs root: the real node gives each pod a network namespace.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AppsV1Api, KubeConfig } from "@kubernetes/client-node";
import { NAMES } from "../../components/runtime/render.ts";
import { generateToken } from "../../runtime/core/tokens.ts";
import { kubeconfig } from "../control-plane/standalone.ts";
import { listenForStop, StopSequence } from "./demoStop.ts";
import { DemoUsageError, FIRST_RUN_NOTICE, howToUse, parseDemoArgs, USAGE } from "./demoText.ts";
import { killDescendants } from "./descendants.ts";
import { openDeployStack } from "./engine.ts";
import { REPO } from "./paths.ts";
import { startPortForward } from "./portForward.ts";

const NAMESPACES = { runtime: "sbx-system", sandbox: "sbx-sandboxes" };
const OWNER = "demo";
/** Pulumi's own await gives up after 10 min; the demo's readiness check after 5 more. */
const READY_TIMEOUT_MS = 300_000;

const log = (line: string) => process.stderr.write(`${line}\n`);
const seconds = (since: number) => (Date.now() - since) / 1000;

/** The folder of the control-plane binaries standalone.ts boots from (kubectl is there too). */
function controlPlaneBin(): string {
  if (process.env.SBX_CONTROL_PLANE_BIN) return process.env.SBX_CONTROL_PLANE_BIN;
  const gomod = readFileSync(join(REPO, "tools/control-plane/go.mod"), "utf8");
  const version = /\bk8s\.io\/kubernetes (v[0-9][^\s]*)/.exec(gomod)?.[1] ?? "missing";
  return join(REPO, ".cache/control-plane", version, "bin");
}

/** scripts/ensure-tools.sh, its output on our stderr so a first-run build shows its progress. */
function ensureTools(): Promise<void> {
  log(FIRST_RUN_NOTICE);
  const child = spawn("bash", [join(REPO, "scripts/ensure-tools.sh")], { stdio: ["ignore", "inherit", "inherit"] });
  return new Promise((resolve, reject) => {
    child.once("error", (err) => reject(new Error(`scripts/ensure-tools.sh could not start: ${err.message}`)));
    child.once("exit", (code, signal) =>
      code === 0
        ? resolve()
        : reject(new Error(`scripts/ensure-tools.sh failed (${signal ?? `exit ${code}`}); its output above says why`)),
    );
  });
}

/** Until both Deployments have every replica updated and ready (Pulumi's await already waited). */
async function waitForDeployments(kubeconfigPath: string, signal: AbortSignal): Promise<void> {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  const apps = kc.makeApiClient(AppsV1Api);
  const deadline = Date.now() + READY_TIMEOUT_MS;
  let last = "";
  while (!signal.aborted) {
    const states = await Promise.all(
      [NAMES.manager, NAMES.controller].map(async (name) => {
        const d = await apps.readNamespacedDeployment({ name, namespace: NAMESPACES.runtime });
        const want = d.spec?.replicas ?? 1;
        const ready = d.status?.readyReplicas ?? 0;
        return { ok: ready >= want && (d.status?.updatedReplicas ?? 0) >= want, text: `${name} ${ready}/${want}` };
      }),
    );
    if (states.every((s) => s.ok)) return;
    last = states.map((s) => s.text).join(", ");
    if (Date.now() > deadline)
      throw new Error(`the Deployments did not become ready in ${READY_TIMEOUT_MS / 1000} s (${last} ready)`);
    await new Promise((r) => setTimeout(r, 1_000));
  }
}

async function readyz(url: string): Promise<void> {
  const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(30_000) });
  if (!res.ok) throw new Error(`${url}/readyz answered ${res.status}: ${(await res.text()).slice(0, 200)}`);
}

async function boot(stop: StopSequence, opts: ReturnType<typeof parseDemoArgs>): Promise<void> {
  stop.defer({
    name: "killing any process left below the demo",
    run: async () => {
      const left = killDescendants();
      if (left.length > 0) log(`sbx demo: killed ${left.length} leftover process(es): ${left.join(" ")}`);
    },
  });
  let t = Date.now();
  await ensureTools();
  const toolsS = seconds(t);
  if (stop.signal.aborted) return;

  log("sbx demo: booting the control plane (etcd, kube-apiserver, scheduler, controller-manager, kwok, sbx-kubelet)");
  t = Date.now();
  const cluster = await stop.track("the control-plane boot", kubeconfig(), 120_000);
  stop.defer({ name: "stopping the control plane", run: cluster.stop, timeoutMs: 60_000 });
  const bootS = seconds(t);
  if (stop.signal.aborted) return;

  const workDir = mkdtempSync(join(tmpdir(), "sbx-demo-"));
  const removeWorkDir = () => rmSync(workDir, { recursive: true, force: true });
  process.once("exit", removeWorkDir); // a forced exit skips the steps
  stop.defer({ name: `removing ${workDir}`, run: async () => removeWorkDir() });

  log(`sbx demo: control plane up in ${bootS.toFixed(1)} s; deploying sbx with the real Pulumi engine`);
  t = Date.now();
  const token = generateToken();
  const stack = await openDeployStack({
    workDir,
    kubeconfig: readFileSync(cluster.path, "utf8"),
    apiTokens: { [OWNER]: token },
    config: {
      namespaces: NAMESPACES,
      ...(cluster.registry ? { snapshots: { repositoryUrl: `${cluster.registry}/sbx-snapshots` } } : {}),
    },
  });
  stop.defer({
    name: "pulumi destroy",
    skippable: true,
    timeoutMs: opts.destroyTimeoutMs,
    run: async () => {
      if (opts.destroyTimeoutMs > 0) await stack.destroy();
      await stack.close();
    },
  });
  const changes = await stop.track("pulumi up", stack.up(), opts.destroyTimeoutMs);
  const upS = seconds(t);
  log(`sbx demo: pulumi up created ${changes.ops.create ?? 0} resources in ${upS.toFixed(1)} s`);
  if (stop.signal.aborted) return;

  t = Date.now();
  await waitForDeployments(cluster.path, stop.signal);
  const kubectl = join(controlPlaneBin(), "kubectl");
  const fwd = await startPortForward({
    kubectl,
    kubeconfig: cluster.path,
    namespace: NAMESPACES.runtime,
    target: `svc/${NAMES.manager}`,
    remotePort: 80,
    localPort: opts.port,
    log,
  });
  stop.defer({ name: "stopping the port-forward", run: fwd.stop, timeoutMs: 10_000 });
  await readyz(fwd.url);
  const readyS = seconds(t);
  if (stop.signal.aborted) return;
  process.stdout.write(
    howToUse({
      url: fwd.url,
      token,
      kubectl,
      kubeconfig: cluster.path,
      namespaces: NAMESPACES,
      registry: cluster.registry,
      seconds: { tools: toolsS, boot: bootS, up: upS, ready: readyS },
      binDir: join(REPO, "node_modules/.bin"),
    }),
  );
}

async function main(): Promise<number> {
  let opts: ReturnType<typeof parseDemoArgs>;
  try {
    opts = parseDemoArgs(process.argv.slice(2));
  } catch (err) {
    if (!(err instanceof DemoUsageError)) throw err;
    log(`sbx demo: ${err.message}`);
    return 2;
  }
  if (opts.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  if (process.getuid?.() !== 0) {
    log(
      "sbx demo: needs root: the control plane's real node gives every runtime pod its own network namespace " +
        "(CAP_NET_ADMIN) and installs Debian packages on first use. Run it as root (e.g. `sudo -E npm run demo:k8s`).",
    );
    return 1;
  }
  const stop = new StopSequence({ log });
  listenForStop((reason) => {
    if (stop.request(reason) === "force") {
      log("sbx demo: exiting now; the control plane's processes are killed on exit");
      process.exit(130);
    }
  });
  try {
    await boot(stop, opts);
  } catch (err) {
    if (!stop.signal.aborted) {
      log(`sbx demo: ${err instanceof Error ? err.message : String(err)}`);
      const failures = await stop.stopNow("the demo failed to start");
      log(
        `sbx demo: stopped after the failure above${failures.length ? ` (and ${failures.length} stop failure(s))` : ""}`,
      );
      return 1;
    }
  }
  const failures = await stop.done();
  log(
    failures.length === 0
      ? "sbx demo: stopped; nothing left running"
      : `sbx demo: stopped with ${failures.length} failure(s)`,
  );
  return failures.length === 0 ? 0 : 1;
}

// The reader of our output may be gone (npm killed, pipe closed): a failed write must not turn
// a clean stop into a crash that leaves the control plane running.
process.stdout.on("error", () => undefined);
process.stderr.on("error", () => undefined);

main().then(
  (code) => process.exit(code),
  (err) => {
    log(`sbx demo: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
