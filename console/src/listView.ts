// What the sandbox list shows: the filter (state, profile, metadata) and the page, as pure
// functions of the API's list, so the page only renders what these decide.
import type { Sandbox } from "./api.ts";

export interface ListFilter {
  /** "" = every phase */
  phase: string;
  /** substring of the profile; "" = any */
  profile: string;
  /** "key=value" (exact), "key" (present), or any text found in a key or value; "" = any */
  metadata: string;
}

export const PHASES = ["Pending", "Running", "Pausing", "Paused", "Resuming", "Failed", "Succeeded", "Terminating"];

export function matchesMetadata(meta: Record<string, string>, query: string): boolean {
  const q = query.trim();
  if (!q) return true;
  const eq = q.indexOf("=");
  if (eq > 0) return meta[q.slice(0, eq)] === q.slice(eq + 1);
  const lower = q.toLowerCase();
  return Object.entries(meta).some(([k, v]) => k.toLowerCase().includes(lower) || v.toLowerCase().includes(lower));
}

/** The sandboxes the filter keeps, newest first. */
export function planList(all: Sandbox[], f: ListFilter): Sandbox[] {
  const profile = f.profile.trim().toLowerCase();
  const kept = all.filter(
    (s) =>
      (!f.phase || s.phase === f.phase) &&
      (!profile || s.profile.toLowerCase().includes(profile)) &&
      matchesMetadata(s.metadata ?? {}, f.metadata),
  );
  // ISO timestamps of one format sort as strings
  return kept.sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : a.id < b.id ? -1 : 1));
}

export interface Page<T> {
  items: T[];
  /** zero-based, clamped to the pages that exist */
  index: number;
  count: number;
}

export function planPage<T>(items: T[], index: number, size: number): Page<T> {
  const count = Math.max(1, Math.ceil(items.length / size));
  const i = Math.min(Math.max(0, index), count - 1);
  return { items: items.slice(i * size, (i + 1) * size), index: i, count };
}
