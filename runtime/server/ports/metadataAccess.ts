// Exposures kept in the sandbox's own metadata (the reserved keys sbx.ports.<port>), for a
// platform whose records are shared: on Kubernetes spec.metadata of the Sandbox resource, so
// every replica sees an exposure the moment it is written and a restarted service finds it. The
// /v1 API neither shows these keys nor lets a caller set them (runtime/server/reservedMetadata.ts).
//
// What it costs: a request that carries no owner token (a public port, a per-port token) finds
// the sandbox through Manager.listMarked, a scan of the in-memory list, not an API call. A write
// is a metadata update, allowed while the sandbox is paused too (whilePaused) where the backend
// keeps metadata across a pause (Kubernetes: one patch of the Sandbox resource, which no pause or
// resume step rewrites), so the woken sandbox has it; elsewhere the Manager refuses it (409).
import { NotFoundError, SbxError } from "../../core/errors.ts";
import type { Manager, Sandbox } from "../../core/types.ts";
import type { PortAccess, PortAccessStore } from "./access.ts";
import { hashPortToken } from "./access.ts";

/** The reserved metadata prefix of exposures: one key per exposed port. */
export const PORTS_METADATA_PREFIX = "sbx.ports.";
const keyOf = (port: number) => `${PORTS_METADATA_PREFIX}${port}`;

type MetadataManager = Pick<Manager, "get"> & Required<Pick<Manager, "updateMetadata" | "listMarked">>;

/** What a key's value holds; the owner is always the sandbox's own, never stored. */
interface StoredAccess {
  public: boolean;
  tokenSha256?: string;
  exposedAt: string;
}

/** The exposure a key's value describes, or undefined for a value that is not one. */
export function parseStoredAccess(owner: string, value: string | undefined): PortAccess | undefined {
  if (value === undefined) return undefined;
  let v: Partial<StoredAccess>;
  try {
    v = JSON.parse(value) as Partial<StoredAccess>;
  } catch {
    return undefined;
  }
  if (typeof v !== "object" || v === null || typeof v.public !== "boolean" || typeof v.exposedAt !== "string")
    return undefined;
  // a non-public port opens only with a well-formed hash: anything else opens nothing
  if (!v.public && !(typeof v.tokenSha256 === "string" && /^[0-9a-f]{64}$/.test(v.tokenSha256))) return undefined;
  return {
    owner,
    public: v.public,
    exposedAt: v.exposedAt,
    ...(v.public ? {} : { tokenSha256: v.tokenSha256 }),
  };
}

function accessesOf(s: Sandbox): Record<string, PortAccess> {
  const out: Record<string, PortAccess> = {};
  for (const [k, v] of Object.entries(s.metadata)) {
    if (!k.startsWith(PORTS_METADATA_PREFIX)) continue;
    const a = parseStoredAccess(s.owner, v);
    if (a) out[k.slice(PORTS_METADATA_PREFIX.length)] = a;
  }
  return out;
}

export class MetadataPortAccessStore implements PortAccessStore {
  private readonly manager: MetadataManager;

  constructor(manager: Manager) {
    if (!manager.updateMetadata || !manager.listMarked)
      throw new SbxError(
        "conflict",
        "ports: exposures in sandbox metadata need a Manager with updateMetadata and listMarked (the service's SandboxManager)",
      );
    this.manager = manager as MetadataManager;
  }

  async get(id: string, port: number, owner?: string): Promise<PortAccess | undefined> {
    const s = (owner && (await this.owned(owner, id))) || (await this.anyOwner(id, port));
    return s && parseStoredAccess(s.owner, s.metadata[keyOf(port)]);
  }

  async list(id: string, owner: string): Promise<Record<string, PortAccess>> {
    const s = await this.owned(owner, id);
    return s ? accessesOf(s) : {};
  }

  async expose(id: string, port: number, owner: string, opts: { public: boolean; token?: string }, at: Date) {
    const stored: StoredAccess = { public: opts.public, exposedAt: at.toISOString() };
    if (opts.token !== undefined) stored.tokenSha256 = hashPortToken(opts.token);
    // whilePaused: the resume reads no sbx.ports key, so a paused sandbox takes the change too
    await this.manager.updateMetadata(owner, id, { [keyOf(port)]: JSON.stringify(stored) }, { whilePaused: true });
    return parseStoredAccess(owner, JSON.stringify(stored))!;
  }

  async close(id: string, port: number, owner: string): Promise<boolean> {
    const s = await this.owned(owner, id);
    if (!s || s.metadata[keyOf(port)] === undefined) return false;
    await this.manager.updateMetadata(owner, id, { [keyOf(port)]: null }, { whilePaused: true });
    return true;
  }

  /** Nothing to do: the exposures went with the sandbox's record. */
  async forget(): Promise<void> {}

  private async owned(owner: string, id: string): Promise<Sandbox | undefined> {
    try {
      return await this.manager.get(owner, id);
    } catch (err) {
      if (err instanceof NotFoundError) return undefined;
      throw err;
    }
  }

  /** The sandbox by id whoever owns it, among those with this port exposed. */
  private async anyOwner(id: string, port: number): Promise<Sandbox | undefined> {
    return (await this.manager.listMarked(keyOf(port))).find((s) => s.id === id);
  }
}
