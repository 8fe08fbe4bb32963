// Wake on traffic and activity on the Kubernetes backend (docs/ports.md "Activity and wake"),
// against the test control plane: one request wakes a paused sandbox whose post-resume hook starts
// the server; 20 concurrent requests cause one resume; an open websocket keeps the idle reaper
// and automatic pause (afterInactivity) away for as long as it is open, and idleness counts from
// its close. Real time here (the controller and the relay's lease run on the system clock), so
// the bounds are generous: the idle limits are 6 s and the lease touches every second.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, SERVER_PY, START_SERVER, sandbox, sh, startServer, WebSocket } from "../../server/ports-support.ts";
import { waitFor } from "../../support/cluster.ts";
import { auth } from "../../support/local.ts";
import { type K8sPortRuntime, startK8sPortRuntime } from "./support.ts";

let rt: K8sPortRuntime;

beforeAll(async () => {
  rt = await startK8sPortRuntime("kwake", {
    ports: { wakeHoldMs: 120_000, connectRetryMs: 60_000 },
    maintenance: true,
  });
  await waitFor("leadership", async () => rt.platform.testing.controller.isLeader(), 20_000);
}, 300_000);

afterAll(async () => {
  await rt?.close();
});

const portUrl = (sid: string, port: number, rest = "") => `${rt.url}/v1/sandboxes/${sid}/ports/${port}${rest}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("wake on traffic on the Kubernetes backend", () => {
  async function pausedWithServer(): Promise<string> {
    const sid = await sandbox(rt, { metadata: { "sbx.post-resume": START_SERVER(8000) } });
    await sh(rt, sid, "cat > /workspace/port-server.py", SERVER_PY);
    const paused = await api(rt, "POST", `/v1/sandboxes/${sid}/pause`);
    expect(paused.status, paused.text).toBe(200);
    expect(paused.json().phase).toBe("Paused");
    return sid;
  }

  it("one HTTP request wakes a paused sandbox and succeeds", async () => {
    const sid = await pausedWithServer();
    const res = await fetch(portUrl(sid, 8000, "/echo"), { headers: auth("alice") });
    expect(res.status, await res.clone().text()).toBe(200);
    expect(((await res.json()) as { path: string }).path).toBe("/echo");
    expect((await api(rt, "GET", `/v1/sandboxes/${sid}`)).json().phase).toBe("Running");
  }, 300_000);

  it("20 concurrent requests to a paused sandbox cause exactly one resume, and all succeed", async () => {
    const sid = await pausedWithServer();
    const before = rt.resumesOf(sid);
    const all = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        fetch(portUrl(sid, 8000, `/echo?n=${i}`), { headers: auth("alice") }).then(async (r) => ({
          status: r.status,
          path: ((await r.json()) as { path?: string }).path,
        })),
      ),
    );
    expect(all.map((r) => r.status)).toEqual(Array(20).fill(200));
    expect(new Set(all.map((r) => r.path)).size).toBe(20);
    await waitFor("the resume's audit line", async () => rt.resumesOf(sid) > before, 10_000);
    await sleep(500);
    expect(rt.resumesOf(sid) - before).toBe(1);
  }, 300_000);
});

describe("an open websocket is activity on the Kubernetes backend", () => {
  /** An open websocket to the fixture's echo; resolves once it is open. */
  async function openWs(sid: string) {
    const ws = new WebSocket(portUrl(sid, 8000, "/ws").replace("http", "ws"), { headers: auth("alice") });
    ws.on("error", () => undefined);
    await new Promise((r, j) => {
      ws.once("open", r);
      ws.once("unexpected-response", (_q, res) => j(new Error(`upgrade answered ${res.statusCode}`)));
    });
    return {
      close: async () => {
        const closed = new Promise((r) => ws.once("close", r));
        ws.close();
        await closed;
      },
    };
  }

  it("keeps the idle reaper away while open; idleness counts from its close", async () => {
    const sid = await sandbox(rt, { idleTimeoutSeconds: 6 });
    await startServer(rt, sid, 8000);
    const ws = await openWs(sid);
    const reapedNow = async () => (await rt.manager.reaper.runOnce()).filter((a) => a.id === sid);
    // 15 s with no API call, far past the 6 s idle timeout: the open stream is the activity
    for (let i = 0; i < 15; i++) {
      await sleep(1000);
      expect(await reapedNow()).toEqual([]);
    }
    await ws.close();
    let reaped: unknown[] = [];
    await waitFor(
      "the reaper takes the sandbox once the websocket is closed",
      async () => {
        reaped = await reapedNow();
        return reaped.length > 0;
      },
      60_000,
    );
    expect(reaped).toEqual([{ id: sid, owner: "alice", reason: "idle" }]);
  }, 180_000);

  it("keeps automatic pause (afterInactivity) away while open; it pauses after the close", async () => {
    const sid = await sandbox(rt, { autoPause: { pause: { afterInactivity: "6s" } } });
    await startServer(rt, sid, 8000);
    const ws = await openWs(sid);
    // the controller ticks every second; reading the audit log is no activity (an API read would be)
    await sleep(15_000);
    expect(rt.audited(sid, "pause")).toBe(0);
    await ws.close();
    await waitFor("automatic pause after the websocket closed", async () => rt.audited(sid, "pause") > 0, 60_000);
  }, 180_000);
});
