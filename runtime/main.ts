// `npm start`: the control-plane service. Config from SBX_CONFIG (JSON) or the defaults
// (platform local), validated once. The role comes from the first argument or SBX_ROLE
// (runtime/config/role.ts; the Deployments run `manager` and `controller`, default `all`).
// On the local platform it installs the tools it needs when
// run as root, creates a token on first start and prints how to use it. SIGINT/SIGTERM (to this
// process or to the npm that runs it) and the death of that npm drain requests and close the
// backend and the embedded registry, leaving nothing running.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { buildIdentities } from "./auth/identities.ts";
import { loadProcessSettings, loadRuntimeConfig, tokensPathFor } from "./config/load.ts";
import { describeRole, validateRoleForPlatform } from "./config/role.ts";
import type { RuntimeConfig } from "./config/schema.ts";
import { systemClock } from "./core/clock.ts";
import { createLogger, type Logger } from "./core/log.ts";
import { addToken, parseTokensFile, TokenFile } from "./core/tokens.ts";
import { type LocalRegistry, REGISTRY_BINARY, startLocalRegistry } from "./local/registry.ts";
import { collectRegistryGarbage } from "./local/registryGc.ts";
import { startService } from "./server/service.ts";
import { SnapshotGc } from "./snapshot/gc.ts";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..");

function has(cmd: string): boolean {
  return spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;
}

/** The local backend needs bubblewrap (umoci only for OCI image profiles). */
function ensureLocalTools(logger: Logger): void {
  if (has("bwrap")) return;
  if (process.getuid?.() === 0) {
    logger.info({ op: "start" }, "bubblewrap missing; installing with scripts/install-debian.sh");
    const r = spawnSync("bash", [join(repo, "scripts/install-debian.sh")], { stdio: "inherit" });
    if (r.status === 0 && has("bwrap")) return;
    throw new Error(
      "scripts/install-debian.sh did not install bubblewrap; install it (apt-get install bubblewrap) and run npm start again",
    );
  }
  throw new Error(
    "the local platform needs bubblewrap: run `sudo apt-get install -y bubblewrap umoci` (or `sudo bash scripts/install-debian.sh`), then npm start again",
  );
}

/** First start: mint a token for the local owner. Later starts reuse the tokens file. */
function ensureToken(path: string, owner: string): string | undefined {
  if (existsSync(path) && parseTokensFile(path, readFileSync(path, "utf8")).size > 0) return undefined;
  return addToken(path, owner);
}

/**
 * The local platform without a configured snapshot registry runs docker-registry on loopback,
 * storage under the state dir, so pause and resume work out of the box. A registry left running
 * by a killed earlier start (same storage) is stopped first.
 */
async function embeddedRegistry(
  config: RuntimeConfig,
  logger: Logger,
): Promise<{ config: RuntimeConfig; gc?: SnapshotGc; stop: () => Promise<void> }> {
  const none = { config, stop: async () => undefined };
  if (config.platform !== "local" || config.snapshots) return none;
  if (!existsSync(REGISTRY_BINARY)) {
    logger.warn(
      { op: "start" },
      `pause/resume are off: ${REGISTRY_BINARY} is missing; install docker-registry (apt-get install docker-registry) or set snapshots.registry`,
    );
    return none;
  }
  const dir = join(config.local.stateDir, "registry");
  stopStale(join(dir, "registry.pid"));
  let registry: LocalRegistry;
  try {
    registry = await startLocalRegistry({ dir });
  } catch (err) {
    logger.warn(
      { op: "start", err },
      "pause/resume are off: the embedded snapshot registry did not start; set snapshots.registry to use another",
    );
    return none;
  }
  writeFileSync(join(dir, "registry.pid"), String(registry.pid));
  logger.info(
    { op: "start", registry: registry.url, storage: registry.storageDir },
    "snapshot registry on loopback for pause/resume",
  );
  // deleted snapshots give their disk back; the first collection also clears what an earlier run left
  const gc = new SnapshotGc({ collect: () => collectRegistryGarbage(registry), logger, clock: systemClock });
  gc.collectSoon();
  const stop = () => gc.close().then(registry.stop);
  return {
    config: { ...config, snapshots: { registry: registry.url, repository: "sbx-snapshots", retentionDays: 7 } },
    gc,
    stop,
  };
}

function stopStale(pidFile: string): void {
  const pid = existsSync(pidFile) ? Number(readFileSync(pidFile, "utf8")) : 0;
  if (!(pid > 0)) return;
  try {
    if (readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("docker-registry")) process.kill(pid, "SIGKILL");
  } catch {
    // gone already
  }
}

/** The controller serves no authenticated route, so it needs (and is given) no tokens. */
const NO_TOKENS = { authenticate: () => undefined };

function openTokens(tokensPath: string, logger: Logger): TokenFile {
  if (!existsSync(tokensPath)) {
    throw new Error(
      `config.tokensPath: ${tokensPath} does not exist: mount the tokens file there (JSON { "<sha256 hex of token>": "<owner>" }), or set tokensPath to where it is`,
    );
  }
  return new TokenFile(tokensPath, (err) =>
    logger.error({ op: "tokens", err, path: tokensPath }, "tokens file unreadable; keeping the last good tokens"),
  );
}

async function main(): Promise<void> {
  const settings = loadProcessSettings(process.env, process.argv.slice(2));
  const logger = createLogger({ level: settings.logLevel });
  const { role, source: roleSource, overridden } = settings.role;
  if (overridden)
    logger.warn(
      { op: "start", role, overridden },
      `the role argument (${role}) wins over ${overridden}: the command line is written for this process`,
    );
  const { config: loaded, source } = loadRuntimeConfig();
  validateRoleForPlatform(role, loaded.platform);
  if (loaded.platform === "local") ensureLocalTools(logger);
  const registry = await embeddedRegistry(loaded, logger);
  const config = registry.config;
  const tokensPath = tokensPathFor(config);
  const fresh = config.platform === "local" ? ensureToken(tokensPath, settings.owner) : undefined;
  // the tokens file, and JWTs from config.auth.issuers (docs/identity.md); their keys are
  // fetched now, in the background, so the first requests do not wait for them
  const tokens =
    role === "controller"
      ? NO_TOKENS
      : buildIdentities(config, openTokens(tokensPath, logger), { now: () => systemClock.now().getTime(), logger });
  if ("warm" in tokens) void tokens.warm();

  const service = await startService({
    config,
    tokens,
    logger,
    clock: systemClock,
    snapshotGc: registry.gc,
    role,
    identity: settings.identity,
  });
  logger.info(
    { op: "start", url: service.url, platform: config.platform, config: source, role, roleSource },
    "sbx control plane listening",
  );
  if (role === "controller") {
    process.stdout.write(`\nsbx controller (${describeRole(role)}): ${service.url}/healthz /readyz /metrics\n\n`);
  } else printHowToUse(service.url, config, source, tokensPath, fresh);
  stopOnRequest(service, registry, logger);
}

function printHowToUse(
  url: string,
  config: RuntimeConfig,
  source: string,
  tokensPath: string,
  fresh: string | undefined,
): void {
  const shown = relative(process.cwd(), tokensPath) || tokensPath;
  const lines = [
    "",
    `sbx control plane: ${url}  (platform ${config.platform}, config ${source})`,
    fresh
      ? `token (shown once; only its sha256 is stored in ${shown}):\n  ${fresh}`
      : `tokens: ${shown} (a token was printed at first start; make another with: npx sbx token create --owner you)`,
    "",
    "try it:",
    `  export SBX_SERVER=${url} SBX_TOKEN=${fresh ?? "<your token>"}`,
    "  ID=$(npx sbx create --size nano)",
    "  npx sbx run $ID -- python3 -c 'print(\"hello from a sandbox\")'",
    ...(config.snapshots
      ? ["  npx sbx pause $ID    # files to the snapshot registry, compute freed; sbx resume $ID (or any run) wakes it"]
      : []),
    "  npx sbx kill $ID",
    `  (npx costs about a second per call; for loops put sbx on the PATH: export PATH="${join(repo, "node_modules/.bin")}:$PATH")`,
    "",
    `API description: ${url}/openapi.json   metrics: ${url}/metrics`,
    "Ctrl-C stops the service and every sandbox it runs.",
    "",
  ];
  process.stdout.write(`${lines.join("\n")}\n`);
}

function stopOnRequest(service: { close(): Promise<void> }, registry: { stop(): Promise<void> }, logger: Logger) {
  // Ctrl-C reaches every process of the group, and npm also relays it to this one: the same
  // keypress can arrive twice within milliseconds. Only a signal well after the first forces exit.
  let stoppingAt = 0;
  stopRequests.handle((signal: string) => {
    if (stoppingAt > 0) {
      if (Date.now() - stoppingAt < 2000) return;
      logger.warn({ op: "shutdown", signal }, "second signal: exiting now");
      process.exit(130);
    }
    stoppingAt = Date.now();
    logger.info({ op: "shutdown", signal }, "stopping: draining requests, closing sandboxes");
    process.stdout.write("sbx: stopping (Ctrl-C again to force)\n");
    service
      .close()
      .then(registry.stop)
      .then(
        () => process.stdout.write("sbx: stopped; every sandbox of this service is closed\n", () => process.exit(0)),
        (err) => {
          logger.error({ op: "shutdown", err }, "shutdown failed");
          process.exit(1);
        },
      );
  });
}

/**
 * Stop requests: SIGINT, SIGTERM, and the death of the npm that started us. Listening from the
 * first line means a request during start-up (tools, registry, backend) is kept and served as
 * soon as there is something to stop, instead of the default action killing this process and
 * orphaning the registry it just started.
 */
function listenForStop(): { handle: (stop: (reason: string) => void) => void } {
  let stop: ((reason: string) => void) | undefined;
  let pending: string | undefined;
  const request = (reason: string): void => {
    if (stop) stop(reason);
    else pending ??= reason;
  };
  process.on("SIGINT", () => request("SIGINT"));
  process.on("SIGTERM", () => request("SIGTERM"));
  if (process.env.npm_lifecycle_event) watchParent(() => request("parent exited"));
  return {
    handle(fn) {
      stop = fn;
      if (pending) fn(pending);
    },
  };
}

/**
 * `npm start` runs this process as npm's child (the script execs node: no shell or tsx process
 * in between, so npm's relay of SIGINT/SIGTERM lands here). A supervisor that SIGKILLs npm, or
 * npm dying any other way, cannot relay anything: we notice being re-parented and stop the same
 * way. Only under npm: a service started directly (systemd, a container) keeps running when
 * the shell that launched it exits. A 1 s poll of getppid is the whole cost.
 */
function watchParent(onGone: () => void, intervalMs = 1000): void {
  const parent = process.ppid;
  if (parent <= 1) return;
  const timer = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(timer);
    onGone();
  }, intervalMs);
  timer.unref();
}

// The reader of our output may be gone (a supervisor killed npm and the pipe with it): a failed
// write must not turn a clean shutdown into a crash that leaves sandboxes running.
process.stdout.on("error", () => undefined);
process.stderr.on("error", () => undefined);
const stopRequests = listenForStop();

main().catch((err) => {
  process.stderr.write(`sbx: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
