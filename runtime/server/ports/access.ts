// Who may reach a sandbox's port besides its owner: per port, public or a per-port access token
// (only its sha256 is kept, the token is shown once). One small JSON file per sandbox under the
// state dir, so an exposure survives a service restart; without a dir (tests, embedders) the
// store lives in memory. The file name is a hash of the id: ids come from URLs. Kubernetes keeps
// them in the sandbox's metadata instead (metadataAccess.ts), shared by every replica.
import { createHash, timingSafeEqual } from "node:crypto";
import { readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { readJsonIfExists, writeJsonAtomic } from "../../core/jsonFile.ts";

export interface PortAccess {
  /** the sandbox's owner when the port was exposed (a public request acts for it) */
  owner: string;
  public: boolean;
  /** sha256 hex of the per-port token; absent for a public port */
  tokenSha256?: string;
  exposedAt: string;
}

interface SandboxAccess {
  version: 1;
  ports: Record<string, PortAccess>;
}

const sha256 = (s: string) => createHash("sha256").update(s, "utf8").digest("hex");

/** What is kept of a per-port token: its sha256, hex. */
export const hashPortToken = sha256;

/**
 * Where exposures live. `owner` is the caller's when known: a store may find the sandbox faster
 * through it (get) or must act as it (list, close); a store ignores an owner it cannot use.
 */
export interface PortAccessStore {
  get(id: string, port: number, owner?: string): Promise<PortAccess | undefined>;
  list(id: string, owner: string): Promise<Record<string, PortAccess>>;
  /** Records the port's access: public, or the hash of `token`. Replaces what was there. */
  expose(
    id: string,
    port: number,
    owner: string,
    opts: { public: boolean; token?: string },
    at: Date,
  ): Promise<PortAccess>;
  /** Back to owner-only. True when the port was exposed. */
  close(id: string, port: number, owner: string): Promise<boolean>;
  /** Drops every exposure of a sandbox that no longer exists. */
  forget(id: string): Promise<void>;
}

/** Constant-time comparison of a presented token with a stored hash. */
export function tokenMatches(access: PortAccess, token: string | undefined): boolean {
  if (!access.tokenSha256 || token === undefined) return false;
  const a = Buffer.from(sha256(token), "hex");
  const b = Buffer.from(access.tokenSha256, "hex");
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * One JSON file per sandbox under `dir` (the local platform), or memory without a dir. The
 * service is the only writer of its state dir, so which files exist is read once (a directory
 * listing) and kept: a sandbox that has no exposure, the usual case on every relayed request,
 * costs no file read (it used to cost an open and its ENOENT exception each time).
 */
export class FilePortAccessStore implements PortAccessStore {
  private readonly cache = new Map<string, SandboxAccess>();
  /** the file names in dir, once listed */
  private names?: Promise<Set<string>>;

  /** dir: where the files live; undefined keeps everything in memory */
  constructor(private readonly dir?: string) {}

  async get(id: string, port: number): Promise<PortAccess | undefined> {
    return (await this.load(id)).ports[String(port)];
  }

  async list(id: string): Promise<Record<string, PortAccess>> {
    return { ...(await this.load(id)).ports };
  }

  async expose(id: string, port: number, owner: string, opts: { public: boolean; token?: string }, at: Date) {
    const doc = await this.load(id);
    const access: PortAccess = { owner, public: opts.public, exposedAt: at.toISOString() };
    if (opts.token !== undefined) access.tokenSha256 = sha256(opts.token);
    await this.save(id, { ...doc, ports: { ...doc.ports, [String(port)]: access } });
    return access;
  }

  async close(id: string, port: number): Promise<boolean> {
    const doc = await this.load(id);
    if (!doc.ports[String(port)]) return false;
    const ports = { ...doc.ports };
    delete ports[String(port)];
    await this.save(id, { ...doc, ports });
    return true;
  }

  async forget(id: string): Promise<void> {
    this.cache.delete(id);
    if (!this.dir) return;
    await rm(join(this.dir, this.name(id)), { force: true });
    (await this.listed()).delete(this.name(id));
  }

  private name(id: string): string {
    return `${sha256(id)}.json`;
  }

  private async load(id: string): Promise<SandboxAccess> {
    const hit = this.cache.get(id);
    if (hit) return hit;
    // a miss is not cached: ids come from URLs, and guessed ones must not grow the cache; the
    // listing answers it without a read
    const stored =
      this.dir && (await this.listed()).has(this.name(id))
        ? await readJsonIfExists<SandboxAccess>(join(this.dir, this.name(id)))
        : undefined;
    if (stored) this.cache.set(id, stored);
    return stored ?? { version: 1, ports: {} };
  }

  private async save(id: string, doc: SandboxAccess): Promise<void> {
    if (this.dir) {
      const names = await this.listed(); // listed before the write, so the listing cannot miss it
      await writeJsonAtomic(this.dir, join(this.dir, this.name(id)), doc);
      names.add(this.name(id));
    }
    this.cache.set(id, doc);
  }

  private listed(): Promise<Set<string>> {
    const dir = this.dir!;
    this.names ??= readdir(dir).then(
      (all) => new Set(all.filter((n) => n.endsWith(".json"))),
      (err: NodeJS.ErrnoException) => {
        if (err.code === "ENOENT") return new Set<string>();
        this.names = undefined; // unreadable now: tried again on the next request, the error is this one's
        throw err;
      },
    );
    return this.names;
  }
}
