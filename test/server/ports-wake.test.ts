// Wake on traffic and activity leases (docs/ports.md), on the REAL local backend with a real
// registry: a paused sandbox whose post-resume hook starts its server is woken by one HTTP
// request that succeeds; 20 concurrent requests cause one resume; past the hold bound the caller
// gets 503 + Retry-After (the hold runs on a manual clock); an open websocket keeps the idle
// reaper away for as long as it is open (the whole runtime on a manual clock).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../runtime/core/clock.ts";
import { auth } from "../support/local.ts";
import { startRegistry, type TestRegistry } from "../support/registry.ts";
import {
  api,
  type PortRuntime,
  SERVER_PY,
  START_SERVER,
  sandbox,
  sh,
  startPortRuntime,
  startServer,
  WebSocket,
} from "./ports-support.ts";

let registry: TestRegistry;
let rt: PortRuntime;
const holdClock = new ManualClock();
const HOLD_MS = 5000;

beforeAll(async () => {
  registry = await startRegistry();
  rt = await startPortRuntime(
    {
      snapshots: { registry: registry.url },
      audit: { path: join(process.cwd(), ".cache", `ports-audit-${process.pid}.jsonl`) },
    },
    { ports: { clock: holdClock, wakeHoldMs: HOLD_MS, connectRetryMs: 10_000 } },
  );
}, 120_000);
afterAll(async () => {
  await rt?.close();
  await registry?.stop();
});

/** A paused sandbox whose post-resume hook (after `delay`) starts the fixture server on 8000. */
async function pausedWithServer(delay = ""): Promise<string> {
  const hook = `${delay}${START_SERVER(8000)}`;
  const id = await sandbox(rt, { metadata: { "sbx.post-resume": hook } });
  await sh(rt, id, "cat > /workspace/port-server.py", SERVER_PY);
  const paused = await api(rt, "POST", `/v1/sandboxes/${id}/pause`);
  expect(paused.status, paused.text).toBe(200);
  expect(paused.json().phase).toBe("Paused");
  return id;
}

function resumesOf(id: string): number {
  const file = join(process.cwd(), ".cache", `ports-audit-${process.pid}.jsonl`);
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((l) => l.includes(`"op":"resume"`) && l.includes(`"sandbox":"${id}"`)).length;
}

async function until(cond: () => boolean, ms: number, what: string) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("wake on traffic", () => {
  it("one HTTP request wakes a paused sandbox, its post-resume hook starts the server, the request succeeds", async () => {
    const id = await pausedWithServer();
    const res = await fetch(`${rt.url}/v1/sandboxes/${id}/ports/8000/echo`, { headers: auth("alice") });
    expect(res.status, await res.clone().text()).toBe(200);
    expect(((await res.json()) as { path: string }).path).toBe("/echo");
    expect((await api(rt, "GET", `/v1/sandboxes/${id}`)).json().phase).toBe("Running");
  }, 120_000);

  it("20 concurrent requests to a paused sandbox cause exactly one resume, and all succeed", async () => {
    const id = await pausedWithServer();
    const before = resumesOf(id);
    const all = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        fetch(`${rt.url}/v1/sandboxes/${id}/ports/8000/echo?n=${i}`, { headers: auth("alice") }).then(async (r) => ({
          status: r.status,
          path: ((await r.json()) as { path?: string }).path,
        })),
      ),
    );
    expect(all.map((r) => r.status)).toEqual(Array(20).fill(200));
    expect(new Set(all.map((r) => r.path)).size).toBe(20);
    // the audit stream writes asynchronously
    await until(() => resumesOf(id) > before, 10_000, "the resume's audit line");
    await new Promise((r) => setTimeout(r, 300));
    expect(resumesOf(id) - before).toBe(1);
  }, 120_000);

  it("past the hold bound the caller gets 503 with Retry-After, never a hang; the wake goes on", async () => {
    // the hook keeps the resume busy for 4 s of real time; the hold is on the manual clock
    const id = await pausedWithServer("sleep 4; ");
    let answered: Response | undefined;
    const pending = fetch(`${rt.url}/v1/sandboxes/${id}/ports/8000/echo`, { headers: auth("alice") }).then(
      (r) => (answered = r),
    );
    // advance the hold clock until the held request gives up (it must register its hold first)
    while (!answered) {
      await holdClock.advance(HOLD_MS);
      await new Promise((r) => setTimeout(r, 20));
    }
    await pending;
    expect(answered.status).toBe(503);
    expect(answered.headers.get("retry-after")).toBe("1");
    const body = (await answered.json()) as { error: { message: string } };
    expect(body.error.message).toContain("ports.wakeHoldSeconds");
    // the wake was not abandoned: a later request finds the sandbox up (joins the wake, or it is done)
    const later = fetch(`${rt.url}/v1/sandboxes/${id}/ports/8000/echo`, { headers: auth("alice") });
    const again = await later;
    expect(again.status).toBe(200);
  }, 120_000);

  it("exposures change while paused: made public, an anonymous request wakes it; closed, it refuses and stays asleep", async () => {
    const id = await pausedWithServer();
    const phase = async () => (await api(rt, "GET", `/v1/sandboxes/${id}`)).json().phase as string;
    const opened = await api(rt, "PUT", `/v1/sandboxes/${id}/exposed-ports/8000`, { public: true });
    expect(opened.status, opened.text).toBe(200);
    expect(opened.json()).toMatchObject({ port: 8000, public: true });
    expect(await phase()).toBe("Paused"); // exposing is no activity that wakes it
    // other metadata still waits for the resume: the resume starts from the record's copy
    const patched = await api(rt, "PATCH", `/v1/sandboxes/${id}`, { metadata: { note: "x" } });
    expect(patched.status, patched.text).toBe(409);
    const woken = await fetch(`${rt.url}/v1/sandboxes/${id}/ports/8000/echo`);
    expect(woken.status, await woken.clone().text()).toBe(200);
    expect(await phase()).toBe("Running");
    expect((await api(rt, "POST", `/v1/sandboxes/${id}/pause`)).status).toBe(200);
    const closed = await api(rt, "DELETE", `/v1/sandboxes/${id}/exposed-ports/8000`);
    expect(closed.json()).toEqual({ port: 8000, closed: true });
    expect((await fetch(`${rt.url}/v1/sandboxes/${id}/ports/8000/echo`)).status).toBe(401);
    expect(await phase()).toBe("Paused");
    // and the close held through a resume
    expect((await api(rt, "POST", `/v1/sandboxes/${id}/resume`)).status).toBe(200);
    expect((await api(rt, "GET", `/v1/sandboxes/${id}/exposed-ports`)).json().ports).toEqual([]);
  }, 120_000);
});

describe("activity leases", () => {
  let crt: PortRuntime;
  const clock = new ManualClock(Date.now());
  beforeAll(async () => {
    crt = await startPortRuntime({}, { clock, ports: { leaseTouchMs: 500 } });
  }, 120_000);
  afterAll(async () => {
    await crt?.close();
  });

  it("an open websocket keeps the idle reaper away for as long as it is open", async () => {
    const busy = await sandbox(crt, { idleTimeoutSeconds: 2 });
    await startServer(crt, busy, 8000);
    const ws = new WebSocket(`${crt.url.replace("http", "ws")}/v1/sandboxes/${busy}/ports/8000/ws`, {
      headers: auth("alice"),
    });
    ws.on("error", () => undefined);
    await new Promise((r) => ws.once("open", r));
    // 10 s of the clock, far past the 2 s idle timeout, with no API call: the open stream is the activity
    for (let t = 0; t < 10_000; t += 500) {
      await clock.advance(500);
      await new Promise((r) => setTimeout(r, 10));
      expect(await crt.manager.reaper.runOnce()).toEqual([]);
    }
    ws.close();
    await new Promise((r) => ws.once("close", r));
    await new Promise((r) => setTimeout(r, 50));
    // idle counts from the stream's end (activity is written at most every quarter of the idle
    // timeout, so the last write may be 0.5 s older): not reaped 1 s later, reaped 2.5 s later
    await clock.advance(1000);
    expect(await crt.manager.reaper.runOnce()).toEqual([]);
    await clock.advance(1500);
    expect(await crt.manager.reaper.runOnce()).toEqual([{ id: busy, owner: "alice", reason: "idle" }]);
  }, 120_000);
});
