// What the sandbox list shows: the filter (state, profile, metadata) and the page, as pure
// functions of the API's list, so the page only renders what these decide.

/** The fields of a listed sandbox (api.ts Sandbox) that the filter reads; kept here so this pure
 * module (and its Node tests) needs no DOM types. */
export interface Listed {
  id: string;
  phase: string;
  profile: string;
  createdAt: string;
  metadata?: Record<string, string>;
}

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
export function planList<T extends Listed>(all: T[], f: ListFilter): T[] {
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

export interface RowWindow {
  /** first row drawn (inclusive) and last (exclusive), indices into the page */
  start: number;
  end: number;
  /** heights of the empty space above and below the drawn rows, in px, so the scrollbar is true */
  padTop: number;
  padBottom: number;
}

/**
 * The rows of a page worth drawing: those in the scrolled viewport plus `overscan` on each side.
 * Every row has one height (the list's cells never wrap), so a thousand-row page costs the DOM
 * work of about fifty rows per update, whatever the page size.
 */
export function planWindow(
  count: number,
  scrollTop: number,
  viewport: number,
  rowHeight: number,
  overscan = 10,
): RowWindow {
  const h = Math.max(1, rowHeight);
  const first = Math.floor(Math.max(0, scrollTop) / h);
  const visible = Math.ceil(Math.max(0, viewport) / h) + 1;
  const start = Math.min(count, Math.max(0, first - overscan));
  const end = Math.min(count, first + visible + overscan);
  return { start, end: Math.max(start, end), padTop: start * h, padBottom: (count - Math.max(start, end)) * h };
}
