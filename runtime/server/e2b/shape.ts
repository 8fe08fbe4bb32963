// Pure translation between our Sandbox and the JSON the E2B SDK parses (SandboxDetail /
// ListedSandbox), the reserved metadata keys the layer keeps on a sandbox, and the list query
// (metadata/state/template filters, order, cursor paging). No I/O here, so it is table-tested.

import { TENANCY_METADATA_PREFIX } from "../../config/tenancy.ts";
import { ValidationError } from "../../core/errors.ts";
import type { Sandbox, SandboxPhase, SandboxResources } from "../../core/types.ts";
import { PORTS_METADATA_PREFIX } from "../ports/metadataAccess.ts";
import { ENVD_VERSION } from "./access.ts";

/**
 * The layer's state, all of it in the sandbox's own metadata (so in its durable record, seen by
 * every replica and after any restart): written at create, and by Manager.updateMetadata when
 * setTimeout/connect move the end or connect mints a token. Never shown to callers, through E2B or
 * /v1; neither lets a caller set them.
 */
export const RESERVED = {
  prefix: "sbx.e2b.",
  template: "sbx.e2b.template",
  tokenHash: "sbx.e2b.token-sha256",
  nonce: "sbx.e2b.token-nonce",
  /** the timeout end (ISO time): set at create, moved by setTimeout, connect and refresh */
  end: "sbx.e2b.end",
  onTimeout: "sbx.e2b.on-timeout",
  /** sha256 of a token connect minted for a key other than the creator's (or a /v1 sandbox) */
  connectTokenHash: "sbx.e2b.connect-token-sha256",
} as const;

export type E2bState = "running" | "paused";

/** E2B knows two states; a sandbox that is ending or ended is, to E2B, gone (404). */
export function e2bState(phase: SandboxPhase): E2bState | undefined {
  if (phase === "Paused" || phase === "Pausing") return "paused";
  if (phase === "Pending" || phase === "Running" || phase === "Resuming") return "running";
  return undefined;
}

/**
 * Keys a caller of E2B may neither see nor set: this layer's, and the port relay's exposures
 * (sbx.ports.<port>: a token's hash), which /v1 hides too (runtime/server/reservedMetadata.ts).
 */
export const SERVICE_PREFIXES = {
  [RESERVED.prefix]: "the service's E2B layer",
  [PORTS_METADATA_PREFIX]: "port exposures (PUT /v1/sandboxes/{id}/exposed-ports/{port})",
  [TENANCY_METADATA_PREFIX]: "the team the creator's token named (docs/tenancy.md)",
} as const;
export const serviceKey = (k: string): string | undefined => Object.keys(SERVICE_PREFIXES).find((p) => k.startsWith(p));

export function userMetadata(metadata: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(metadata).filter(([k]) => !serviceKey(k)));
}

/** The timeout end in the sandbox's metadata (the hard TTL when it has none), never past the hard TTL. */
export function endAtMs(s: Sandbox): number {
  const hard = Date.parse(s.expiresAt);
  const end = Date.parse(s.metadata[RESERVED.end] ?? "");
  return Number.isFinite(end) ? Math.min(end, hard) : hard;
}

export interface E2bSandboxJson {
  sandboxID: string;
  templateID: string;
  clientID: string;
  metadata: Record<string, string>;
  envdVersion: string;
  startedAt: string;
  endAt: string;
  state: E2bState;
  cpuCount: number;
  memoryMB: number;
  domain: string | null;
}

/** SandboxDetail / ListedSandbox for a live sandbox (callers filter out the gone ones first). */
export function toE2b(s: Sandbox, domain: string | undefined): E2bSandboxJson {
  return {
    sandboxID: s.id,
    templateID: s.metadata[RESERVED.template] ?? s.profile,
    // a legacy field the API still sends; E2B meant the cluster that runs the sandbox
    clientID: s.node ?? "sbx",
    metadata: userMetadata(s.metadata),
    envdVersion: ENVD_VERSION,
    startedAt: s.createdAt,
    endAt: new Date(endAtMs(s)).toISOString(),
    state: e2bState(s.phase) ?? "running",
    // the size class's requests: what admission reserved for it
    cpuCount: Math.max(1, Math.ceil(s.cpuRequestMillis / 1000)),
    memoryMB: Math.round(s.memoryRequestBytes / 2 ** 20),
    domain: domain ?? null,
  };
}

export interface ListQuery {
  metadata?: string;
  state?: string;
  template?: string;
  startedAfter?: string;
  order?: "asc" | "desc";
  limit?: number;
  nextToken?: string;
}

export interface ListFilter {
  metadata: Record<string, string>;
  states: Set<E2bState>;
  template?: string;
  startedAfterMs?: number;
  order: "asc" | "desc";
  limit: number;
  after?: { createdAt: string; id: string };
}

export const LIST_LIMIT = { default: 100, max: 1000 } as const;

/** `metadata=k%3Dv%26k2%3Dv2`: the SDK encodes each key and value, then the pairs as one value. */
export function parseMetadataFilter(raw: string | undefined): Record<string, string> {
  if (raw === undefined || raw === "") return {};
  const out: Record<string, string> = {};
  for (const [k, v] of new URLSearchParams(raw)) {
    try {
      out[decodeURIComponent(k)] = decodeURIComponent(v);
    } catch {
      throw new ValidationError(
        "metadata",
        raw,
        "must be key=value pairs joined by '&', each key and value percent-encoded (as the E2B SDK sends it)",
      );
    }
  }
  return out;
}

export function parseStates(raw: string | undefined): Set<E2bState> {
  if (raw === undefined || raw === "") return new Set(["running", "paused"]);
  const states = new Set<E2bState>();
  for (const s of raw.split(",")) {
    if (s !== "running" && s !== "paused")
      throw new ValidationError("state", raw, 'use "running", "paused" or both, comma-separated');
    states.add(s);
  }
  return states;
}

export function encodeNextToken(s: Pick<Sandbox, "createdAt" | "id">): string {
  return Buffer.from(JSON.stringify([s.createdAt, s.id]), "utf8").toString("base64url");
}

function decodeNextToken(raw: string): { createdAt: string; id: string } {
  try {
    const v = JSON.parse(Buffer.from(raw, "base64url").toString("utf8"));
    if (Array.isArray(v) && v.length === 2 && typeof v[0] === "string" && typeof v[1] === "string")
      return { createdAt: v[0], id: v[1] };
  } catch {
    // falls through to the error below
  }
  throw new ValidationError("nextToken", raw, "pass the x-next-token header of the previous page unchanged");
}

export function resolveListFilter(q: ListQuery): ListFilter {
  let startedAfterMs: number | undefined;
  if (q.startedAfter !== undefined) {
    startedAfterMs = Date.parse(q.startedAfter);
    if (!Number.isFinite(startedAfterMs))
      throw new ValidationError("startedAfter", q.startedAfter, "must be an RFC 3339 time, e.g. 2026-01-01T00:00:00Z");
  }
  return {
    metadata: parseMetadataFilter(q.metadata),
    states: parseStates(q.state),
    template: q.template || undefined,
    startedAfterMs,
    order: q.order ?? "asc",
    limit: q.limit ?? LIST_LIMIT.default,
    after: q.nextToken ? decodeNextToken(q.nextToken) : undefined,
  };
}

function matches(s: Sandbox, f: ListFilter): boolean {
  const state = e2bState(s.phase);
  if (!state || !f.states.has(state)) return false;
  if (f.template !== undefined && (s.metadata[RESERVED.template] ?? s.profile) !== f.template) return false;
  if (f.startedAfterMs !== undefined && Date.parse(s.createdAt) <= f.startedAfterMs) return false;
  for (const [k, v] of Object.entries(f.metadata)) {
    if (serviceKey(k) || s.metadata[k] !== v) return false;
  }
  return true;
}

/** (createdAt, id) order: stable across pages even when sandboxes come and go between them. */
function compare(a: { createdAt: string; id: string }, b: { createdAt: string; id: string }): number {
  return a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/** One page of the caller's sandboxes and the token of the next page (absent on the last). */
export function pageOf(all: Sandbox[], f: ListFilter): { items: Sandbox[]; nextToken?: string } {
  const dir = f.order === "desc" ? -1 : 1;
  const sorted = all.filter((s) => matches(s, f)).sort((a, b) => dir * compare(a, b));
  const rest = f.after ? sorted.filter((s) => dir * compare(s, f.after!) > 0) : sorted;
  const items = rest.slice(0, f.limit);
  const last = items.at(-1);
  return { items, nextToken: rest.length > f.limit && last ? encodeNextToken(last) : undefined };
}

/**
 * Our resource history as the SDK's SandboxMetrics list (timestamp, cpuUsedPct of cpuCount cores,
 * memUsed as the working set, memCache, diskUsed of /workspace against its size). A first sample has
 * no CPU rate yet: 0 there, since the SDK's type has no absent figure.
 */
export function toE2bMetrics(r: SandboxResources): Record<string, unknown>[] {
  return r.samples.map((s) => ({
    timestamp: s.at,
    timestampUnix: Math.floor(Date.parse(s.at) / 1000),
    cpuUsedPct: round2(s.cpuPct ?? 0),
    cpuCount: r.limits.cpuCores,
    memUsed: s.memoryWorkingSetBytes ?? s.memoryBytes ?? 0,
    memTotal: r.limits.memoryBytes,
    memCache: s.memoryCacheBytes ?? 0,
    diskUsed: s.workspaceUsedBytes ?? 0,
    diskTotal: r.limits.workspaceBytes,
  }));
}

function round2(n: number): number {
  return Math.round(n * 100) / 100;
}
