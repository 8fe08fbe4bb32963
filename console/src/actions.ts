// Lifecycle actions shared by the list and the sandbox page, and the events the console saw:
// phase changes between two looks, and each pause and resume with how long it took. The API has
// no event feed; these are what this page observed since it was opened.
import { call, type Sandbox } from "./api.ts";

export interface ConsoleEvent {
  at: Date;
  text: string;
}

const events = new Map<string, ConsoleEvent[]>();
const lastPhase = new Map<string, string>();

export function eventsOf(id: string): ConsoleEvent[] {
  return events.get(id) ?? [];
}

export function record(id: string, text: string): void {
  const list = events.get(id) ?? [];
  list.push({ at: new Date(), text });
  if (list.length > 200) list.shift();
  events.set(id, list);
}

/** Notes a phase seen for a sandbox; a change from the last one seen becomes an event. */
export function observe(s: Sandbox): void {
  const before = lastPhase.get(s.id);
  if (before !== s.phase) {
    record(s.id, before ? `phase ${before} → ${s.phase}` : `seen ${s.phase}`);
    lastPhase.set(s.id, s.phase);
  }
}

const path = (id: string) => `/v1/sandboxes/${encodeURIComponent(id)}`;

async function timed(id: string, verb: string, run: () => Promise<Sandbox>): Promise<Sandbox> {
  const t0 = performance.now();
  record(id, `${verb} requested`);
  try {
    const s = await run();
    record(id, `${verb} done in ${Math.round(performance.now() - t0)} ms`);
    observe(s);
    return s;
  } catch (err) {
    record(id, `${verb} failed after ${Math.round(performance.now() - t0)} ms: ${(err as Error).message}`);
    throw err;
  }
}

export const pause = (id: string) => timed(id, "pause", () => call<Sandbox>("POST", `${path(id)}/pause`));
export const resume = (id: string) => timed(id, "resume", () => call<Sandbox>("POST", `${path(id)}/resume`));

export async function kill(id: string): Promise<void> {
  await call<void>("DELETE", path(id));
  record(id, "killed");
}

export function create(body: Record<string, unknown>): Promise<Sandbox> {
  return call<Sandbox>("POST", "/v1/sandboxes", body);
}

export { path as sandboxPath };
