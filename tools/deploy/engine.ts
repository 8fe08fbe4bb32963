// Drives our Pulumi program with the real engine (scripts/build-pulumi.sh) through the
// Automation API. The Node.js language host is not on the Go module proxy, so the program runs
// inline, in this process, from infra/program.ts's buildProgram: the same body infra/index.ts
// wires for `pulumi up`. State lives in a file backend in the work dir; no Pulumi Cloud, no
// plugin downloads, no update check.
//
// Two traps this module exists to avoid (docs/deploy.md):
// - The Automation API hands back the update summary and the outputs with secrets in clear
//   text (kubeconfig, API tokens). Nothing here logs or returns them: callers get counts.
// - setConfig rewrites the stack file. The stack file is a copy in the work dir, never the
//   repo's stacks/Pulumi.local.yaml.
import { randomBytes } from "node:crypto";
import {
  copyFileSync,
  createWriteStream,
  existsSync,
  mkdirSync,
  readFileSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import * as pulumi from "@pulumi/pulumi";
import {
  type ConfigMap,
  type EngineEvent,
  LocalWorkspace,
  type OpMap,
  PulumiCommand,
  type Stack,
} from "@pulumi/pulumi/automation/index.js";
import { bundleRuntime, type RuntimeBundle } from "../../components/runtime/bundle.ts";
import { buildProgram } from "../../infra/program.ts";
import { boundPodAwaits, skipPodAwaits } from "./awaits.ts";
import { locateEngine, REPO } from "./paths.ts";
import { policyPacksInOutput } from "./policyReport.ts";
import { LineBuffer, makeRedactor } from "./redact.ts";

const PROJECT = "sbx";
const RUNTIME_ENTRY = fileURLToPath(new URL("../../runtime/main.ts", import.meta.url));

export interface DeployOptions {
  /** owns the state backend, the stack file copy, PULUMI_HOME and engine.log; created if missing */
  workDir: string;
  /** the cluster the existing-cluster stack deploys onto (kubeconfig file content) */
  kubeconfig: string;
  /** API tokens by user, stored as the secret `sbx:apiTokens` */
  apiTokens: Record<string, string>;
  /** other secret `sbx:*` values (e.g. registryTokenKey), keys without the prefix; kept out of the log */
  secrets?: Record<string, string>;
  /** stack config to copy (default stacks/Pulumi.local.yaml); only the copy is ever written */
  stackFile?: string;
  stackName?: string;
  /** `sbx:*` values set over the copy, keys without the `sbx:` prefix; objects are stored as JSON */
  config?: Record<string, unknown>;
  /** the runtime bundle (default: runtime/main.ts bundled once per DeployStack) */
  bundle?: () => RuntimeBundle;
  /**
   * Wait, as a real deploy does, until Deployments are Ready and Services have endpoints
   * (default true). false skips those awaits in this driver's program only (awaits.ts).
   */
  awaitPods?: boolean;
  /** with awaitPods on: fail an await after this many seconds (default: the provider's 600) */
  awaitTimeoutSeconds?: number;
  /** a built engine elsewhere (default SBX_PULUMI_DIR, then .cache/pulumi/v<version>) */
  engineDir?: string;
}

/** What an operation changed, by kind of step; never the summary itself (it holds secrets). */
export interface Changes {
  ops: OpMap;
  /** steps other than `same`: 0 means the stack matched the program */
  changed: number;
}

/** A preview's counts plus what the policy packs did, so a caller can tell a pack ran at all. */
export interface PreviewChanges extends Changes {
  /** the packs the engine ran, name -> version ("sbx-security" -> "0.1.0") */
  policyPacks: Record<string, string>;
  /** violations the packs reported; messages redacted like the log */
  violations: { pack: string; policy: string; level: string; urn?: string; message: string }[];
}

export interface DeployStack {
  readonly logFile: string;
  up(): Promise<Changes>;
  /** `policyPacks`: folders of policy packs to run (e.g. `<repo>/policy`) */
  preview(opts?: { policyPacks?: string[] }): Promise<PreviewChanges>;
  refresh(): Promise<Changes>;
  destroy(): Promise<Changes>;
  /** the managed resources' type and outputs; secret outputs stay encrypted, but never log them */
  exportState(): Promise<StateResource[]>;
  /** ends the log file; the stack and its state stay in the work dir */
  close(): Promise<void>;
}

export interface StateResource {
  urn: string;
  type: string;
  // biome-ignore lint/suspicious/noExplicitAny: outputs are whatever each resource type stores
  outputs: Record<string, any>;
}

/** An engine operation failed; the message carries the redacted tail of its output. */
export class DeployError extends Error {
  constructor(op: string, detail: string, logFile: string) {
    super(`pulumi ${op} failed: ${detail}\n(engine output, redacted: ${logFile})`);
    this.name = "DeployError";
  }
}

export function countChanges(ops: OpMap | undefined): Changes {
  const all = { ...(ops ?? {}) };
  const changed = Object.entries(all)
    .filter(([op]) => op !== "same")
    .reduce((n, [, count]) => n + (count ?? 0), 0);
  return { ops: all, changed };
}

/** The passphrase that encrypts this work dir's secrets, made once and kept beside the state. */
function passphrase(workDir: string): string {
  const file = join(workDir, ".passphrase");
  if (!existsSync(file)) writeFileSync(file, randomBytes(24).toString("hex"), { mode: 0o600 });
  return readFileSync(file, "utf8").trim();
}

/**
 * A PULUMI_HOME per work dir (its workspace and lock files are per-run state), whose plugins
 * folder is the built engine's: the provider is found installed and never downloaded.
 */
function pulumiHome(workDir: string, pluginsDir: string): string {
  const home = join(workDir, "pulumi-home");
  mkdirSync(home, { recursive: true });
  if (!existsSync(join(home, "plugins"))) symlinkSync(pluginsDir, join(home, "plugins"));
  return home;
}

function configValue(value: unknown): string {
  return typeof value === "string" ? value : JSON.stringify(value);
}

export async function openDeployStack(o: DeployOptions): Promise<DeployStack> {
  const engine = locateEngine(o.engineDir);
  const workDir = resolve(o.workDir);
  const stackName = o.stackName ?? "local";
  mkdirSync(join(workDir, "state"), { recursive: true });
  const stackCopy = join(workDir, `Pulumi.${stackName}.yaml`);
  // copied before the stack exists: `stack init` then adds its encryption salt to the copy
  if (!existsSync(stackCopy)) copyFileSync(o.stackFile ?? join(REPO, "stacks/Pulumi.local.yaml"), stackCopy);

  const backend = `file://${join(workDir, "state")}`;
  const pulumiCommand = await PulumiCommand.get({ root: engine.root, skipVersionCheck: false });
  // get() only checks the SDK's minimum; a CLI other than the pin means a stale build
  if (pulumiCommand.version?.version !== engine.cliVersion)
    throw new Error(
      `Pulumi engine: ${engine.root}/bin/pulumi is version ${pulumiCommand.version?.version ?? "unknown"}, ` +
        `the SDK pin is ${engine.cliVersion}: rebuild it with \`bash scripts/build-pulumi.sh\``,
    );
  let bundle: RuntimeBundle | undefined;
  const bundleOnce = o.bundle ?? (() => (bundle ??= bundleRuntime(RUNTIME_ENTRY)));
  const stack = await LocalWorkspace.createOrSelectStack(
    {
      stackName,
      projectName: PROJECT,
      program: async () => {
        if (o.awaitPods === false) pulumi.runtime.registerResourceTransform(skipPodAwaits);
        else if (o.awaitTimeoutSeconds) pulumi.runtime.registerResourceTransform(boundPodAwaits(o.awaitTimeoutSeconds));
        return buildProgram({ bundle: bundleOnce });
      },
    },
    {
      workDir,
      pulumiCommand,
      pulumiHome: pulumiHome(workDir, engine.pluginsDir),
      projectSettings: { name: PROJECT, runtime: "nodejs", backend: { url: backend } },
      envVars: {
        PULUMI_BACKEND_URL: backend,
        PULUMI_CONFIG_PASSPHRASE: passphrase(workDir),
        PULUMI_SKIP_UPDATE_CHECK: "true",
        PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION: "true",
        // a pulumi-resource-kubernetes on PATH must not shadow the one we built
        PULUMI_IGNORE_AMBIENT_PLUGINS: "true",
        PULUMI_SKIP_CONFIRMATIONS: "true",
      },
    },
  );
  const secrets: ConfigMap = {
    [`${PROJECT}:kubeconfig`]: { value: o.kubeconfig, secret: true },
    [`${PROJECT}:apiTokens`]: { value: JSON.stringify(o.apiTokens), secret: true },
    ...Object.fromEntries(
      Object.entries(o.secrets ?? {}).map(([k, v]) => [`${PROJECT}:${k}`, { value: v, secret: true }]),
    ),
  };
  const plain: ConfigMap = Object.fromEntries(
    Object.entries(o.config ?? {}).map(([k, v]) => [`${PROJECT}:${k}`, { value: configValue(v) }]),
  );
  await stack.setAllConfig({ ...plain, ...secrets });
  return wrap(stack, join(workDir, "engine.log"), [
    o.kubeconfig,
    ...Object.values(o.apiTokens),
    ...Object.values(o.secrets ?? {}),
  ]);
}

function wrap(stack: Stack, logFile: string, secretValues: string[]): DeployStack {
  const redact = makeRedactor(secretValues);
  const log = createWriteStream(logFile, { flags: "a", mode: 0o600 });
  let logError: Error | undefined;
  let closed: Promise<void> | undefined;
  log.on("error", (err) => {
    logError = err; // reported by the next operation, never thrown from an event
  });

  /** Runs one operation with its output redacted into the log; failures carry the redacted tail. */
  async function run<T>(op: string, fn: (onOutput: (s: string) => void) => Promise<T>): Promise<T> {
    if (logError) throw new Error(`engine log ${logFile}: ${logError.message}`);
    const lines = new LineBuffer();
    const tail: string[] = [];
    const write = (text: string) => {
      const clean = redact(text);
      log.write(clean);
      tail.push(clean);
      if (tail.length > 30) tail.shift();
    };
    log.write(`\n=== pulumi ${op} ${new Date().toISOString()}\n`);
    try {
      return await fn((chunk) => {
        for (const line of lines.push(chunk)) write(line);
      });
    } catch (err) {
      for (const line of lines.flush()) write(line);
      throw new DeployError(op, failureDetail(err, tail, redact), logFile);
    } finally {
      for (const line of lines.flush()) write(line);
    }
  }

  const common = { color: "never" as const, showSecrets: false };
  return {
    logFile,
    up: () =>
      run("up", async (onOutput) => countChanges((await stack.up({ ...common, onOutput })).summary.resourceChanges)),
    preview: (opts = {}) =>
      run("preview", async (onOutput) => {
        let output = "";
        const violations: PreviewChanges["violations"] = [];
        const onEvent = (e: EngineEvent) => {
          const v = e.policyEvent;
          if (v)
            violations.push({
              pack: v.policyPackName,
              policy: v.policyName,
              level: v.enforcementLevel,
              urn: v.resourceUrn,
              message: redact(v.message),
            });
        };
        const result = await stack.preview({
          color: "never",
          onEvent,
          policyPacks: opts.policyPacks,
          onOutput: (chunk) => {
            output += chunk;
            onOutput(chunk);
          },
        });
        return { ...countChanges(result.changeSummary), policyPacks: policyPacksInOutput(output), violations };
      }),
    refresh: () =>
      run("refresh", async (onOutput) =>
        countChanges((await stack.refresh({ ...common, onOutput })).summary.resourceChanges),
      ),
    destroy: () =>
      run("destroy", async (onOutput) =>
        countChanges((await stack.destroy({ ...common, onOutput })).summary.resourceChanges),
      ),
    exportState: async () => {
      const state = await stack.exportStack();
      const resources: StateResource[] = state.deployment?.resources ?? [];
      return resources.map((r) => ({ urn: r.urn, type: r.type, outputs: r.outputs ?? {} }));
    },
    close: () => {
      closed ??= new Promise<void>((done) => log.end(done));
      return closed;
    },
  };
}

/**
 * The last lines of a failed operation, redacted: the engine's stderr if it wrote any, else
 * its output. (A CommandError's own message repeats all of stdout and stderr unredacted.)
 */
function failureDetail(err: unknown, outputTail: string[], redact: (s: string) => string): string {
  const stderr = redact((err as { commandResult?: { stderr?: string } }).commandResult?.stderr ?? "").trim();
  if (stderr) return stderr.split("\n").slice(-15).join("\n");
  const output = outputTail.join("").trim();
  if (output) return output;
  return redact(err instanceof Error ? err.message : String(err));
}
