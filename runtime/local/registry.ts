// An OCI distribution registry (Debian's docker-registry) on a free loopback port: the local
// platform's snapshot registry when none is configured (npm start), and the tests' and
// benchmarks' registry. Storage lives in `dir` (kept) or a temporary directory (removed on stop).
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { tokenAuthConfig } from "../config/schema.ts";
import { freePort } from "../core/ports.ts";

export const REGISTRY_BINARY = "/usr/bin/docker-registry";

export interface LocalRegistry {
  /** host:port, e.g. 127.0.0.1:40123 */
  host: string;
  /** http://host:port */
  url: string;
  /** filesystem storage root (blobs live under docker/registry/v2/blobs/sha256/..) */
  storageDir: string;
  /** the registry's config file and binary, for `garbage-collect` (runtime/local/registryGc.ts) */
  configPath: string;
  binary: string;
  pid: number;
  stop(): Promise<void>;
}

/** Starts docker-registry and resolves once /v2/ answers. */
export interface LocalRegistryOptions {
  binary?: string;
  startTimeoutMs?: number;
  /** htpasswd file content (bcrypt): the registry then requires basic auth */
  htpasswd?: string;
  /** where config and storage live, kept across restarts; default a temporary directory removed on stop */
  dir?: string;
  /** names the registry in errors */
  purpose?: string;
  /** token auth (runtime/snapshot/registryToken.ts): the issuer's certificate, issuer and service */
  token?: { certPem: string; issuer: string; service: string };
}

// Over 60 lines on purpose: config, spawn, readiness wait and stop of one child process, in the order they happen.
export async function startLocalRegistry(opts: LocalRegistryOptions = {}): Promise<LocalRegistry> {
  const purpose = opts.purpose ?? "snapshot registry";
  const binary = opts.binary ?? REGISTRY_BINARY;
  if (!existsSync(binary)) {
    throw new Error(
      `${purpose}: ${binary} not found: install the Debian package docker-registry (apt-get install docker-registry, or scripts/ensure-tools.sh)`,
    );
  }
  const dir = opts.dir ?? (await mkdtemp(join(tmpdir(), "sbx-registry-")));
  await mkdir(dir, { recursive: true });
  const storageDir = join(dir, "storage");
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  const config = [
    "version: 0.1",
    "log:",
    "  level: error",
    "  accesslog:",
    "    disabled: true",
    "storage:",
    "  filesystem:",
    `    rootdirectory: ${storageDir}`,
    // No `cache:` section, so no blob descriptor cache: after a garbage collection removed a
    // blob, a cached descriptor would let a manifest push referencing it succeed (distribution
    // issue 2367). Without it every check reads the storage.
    "  delete:",
    "    enabled: true",
    "  maintenance:",
    "    uploadpurging:",
    "      enabled: false",
    "http:",
    `  addr: ${host}`,
    ...(opts.htpasswd ? ["auth:", "  htpasswd:", "    realm: sbx-test", `    path: ${join(dir, "htpasswd")}`] : []),
    ...(opts.token ? tokenAuthConfig(opts.token, join(dir, "token.crt")) : []),
    "",
  ].join("\n");
  if (opts.htpasswd) await writeFile(join(dir, "htpasswd"), opts.htpasswd);
  if (opts.token) await writeFile(join(dir, "token.crt"), opts.token.certPem);
  const configPath = join(dir, "config.yml");
  await writeFile(configPath, config);
  const child: ChildProcess = spawn(binary, ["serve", configPath], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null && child.pid) {
      process.kill(child.pid, "SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
      if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, "SIGKILL");
    }
    if (!opts.dir) await rm(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + (opts.startTimeoutMs ?? 15_000);
  for (;;) {
    if (child.exitCode !== null) {
      await stop();
      throw new Error(
        `${purpose}: ${binary} exited with code ${child.exitCode} before serving on ${host}: ${stderr.trim()}`,
      );
    }
    try {
      const res = await fetch(`http://${host}/v2/`);
      if (res.status === 200 || ((opts.htpasswd || opts.token) && res.status === 401)) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(
        `${purpose}: ${binary} did not answer on http://${host}/v2/ within ${opts.startTimeoutMs ?? 15_000} ms: ${stderr.trim()}`,
      );
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { host, url: `http://${host}`, storageDir, configPath, binary, pid: child.pid!, stop };
}
