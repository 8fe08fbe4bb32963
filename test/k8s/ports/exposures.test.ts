// Exposures (public ports, per-port tokens) on the Kubernetes backend (docs/ports.md "Access"):
// kept in the Sandbox resource's metadata under the reserved keys sbx.ports.<port>, so a second
// service replica (its own backend, Manager and app; as good as a restarted service) sees them and
// closing on one closes on both. /v1 neither shows those keys nor lets a caller set them. And a
// replica shutting down ends the relayed connections still open instead of waiting on them.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PORTS_METADATA_PREFIX } from "../../../runtime/server/ports/metadataAccess.ts";
import { api, SERVER_PY, START_SERVER, sandbox, sh, startServer, WebSocket } from "../../server/ports-support.ts";
import { waitFor } from "../../support/cluster.ts";
import { auth } from "../../support/local.ts";
import { type K8sPortReplica, type K8sPortRuntime, startK8sPortRuntime } from "./support.ts";

let rt: K8sPortRuntime;
let b: K8sPortReplica;
let id: string;

beforeAll(async () => {
  rt = await startK8sPortRuntime("kexpo");
  await waitFor("leadership", async () => rt.platform.testing.controller.isLeader(), 20_000);
  b = await rt.replica("kexpo-b");
  id = await sandbox(rt);
  await startServer(rt, id, 8000);
}, 300_000);

afterAll(async () => {
  await rt?.close();
});

const at = (r: { url: string }, path = "/echo") => `${r.url}/v1/sandboxes/${id}/ports/8000${path}`;
const status = async (url: string, headers: Record<string, string> = {}) => (await fetch(url, { headers })).status;

describe("exposures on the Kubernetes backend", () => {
  it("a public port opened on one replica is open on the other, and closed on both when closed on either", async () => {
    expect(await status(at(rt))).toBe(401);
    const opened = await api(rt, "PUT", `/v1/sandboxes/${id}/exposed-ports/8000`, { public: true });
    expect(opened.status, opened.text).toBe(200);
    expect(opened.json()).toMatchObject({ port: 8000, public: true, url: `${rt.url}/v1/sandboxes/${id}/ports/8000/` });
    expect(await status(at(rt))).toBe(200);
    // the other replica never saw the PUT: it reads the sandbox's record
    await waitFor("replica B serves the public port", async () => (await status(at(b))) === 200, 10_000);
    expect((await api(b, "GET", `/v1/sandboxes/${id}/exposed-ports`)).json().ports).toMatchObject([
      { port: 8000, public: true },
    ]);
    const closed = await api(b, "DELETE", `/v1/sandboxes/${id}/exposed-ports/8000`);
    expect(closed.json()).toEqual({ port: 8000, closed: true });
    expect(await status(at(b))).toBe(401);
    await waitFor("replica A refuses it again", async () => (await status(at(rt))) === 401, 10_000);
  });

  it("a per-port token made on one replica opens the port on the other; only its hash is stored", async () => {
    const opened = await api(rt, "PUT", `/v1/sandboxes/${id}/exposed-ports/8000`, {});
    const token = opened.json().token as string;
    expect(token).toMatch(/^sbx_/);
    const bearer = { authorization: `Bearer ${token}` };
    await waitFor("replica B accepts the token", async () => (await status(at(b), bearer)) === 200, 10_000);
    expect(await status(at(b, `/echo?sbx_token=${token}`))).toBe(200);
    expect(await status(at(b), { authorization: "Bearer sbx_wrong" })).toBe(401);
    // another owner's token is no token for this port; the per-port one still works
    expect(await status(at(b), auth("bob"))).toBe(404);
    // in the record: the reserved key with the hash, never the token
    const stored = (await rt.backend.describe(id))?.metadata[`${PORTS_METADATA_PREFIX}8000`] ?? "";
    expect(JSON.parse(stored)).toMatchObject({ public: false, tokenSha256: expect.stringMatching(/^[0-9a-f]{64}$/) });
    expect(stored).not.toContain(token);
    await api(b, "DELETE", `/v1/sandboxes/${id}/exposed-ports/8000`);
    await waitFor("replica A refuses the token", async () => (await status(at(rt), bearer)) === 401, 10_000);
  });

  it("exposures change while paused: made public on one replica, an anonymous request to the other wakes it; closed, it stays asleep", async () => {
    const sid = await sandbox(rt, { metadata: { "sbx.post-resume": START_SERVER(8000) } });
    await sh(rt, sid, "cat > /workspace/port-server.py", SERVER_PY);
    const url = (r: { url: string }) => `${r.url}/v1/sandboxes/${sid}/ports/8000/echo`;
    const phase = async () => (await api(rt, "GET", `/v1/sandboxes/${sid}`)).json().phase as string;
    expect((await api(rt, "POST", `/v1/sandboxes/${sid}/pause`)).status).toBe(200);
    const opened = await api(rt, "PUT", `/v1/sandboxes/${sid}/exposed-ports/8000`, { public: true });
    expect(opened.status, opened.text).toBe(200);
    expect(await phase()).toBe("Paused");
    // other metadata still waits for the resume, which reads hooks and sbx.auto-resume from the record
    const patched = await api(rt, "PATCH", `/v1/sandboxes/${sid}`, { metadata: { note: "x" } });
    expect(patched.status, patched.text).toBe(409);
    // replica B never saw the PUT: the exposure is in the Sandbox resource, which it watches
    await waitFor(
      "replica B lists the exposure of the paused sandbox",
      async () => (await api(b, "GET", `/v1/sandboxes/${sid}/exposed-ports`)).json().ports?.length === 1,
      10_000,
    );
    const woken = await fetch(url(b));
    expect(woken.status, await woken.clone().text()).toBe(200);
    expect(await phase()).toBe("Running");
    expect((await api(rt, "POST", `/v1/sandboxes/${sid}/pause`)).status).toBe(200);
    const closed = await api(b, "DELETE", `/v1/sandboxes/${sid}/exposed-ports/8000`);
    expect(closed.json()).toEqual({ port: 8000, closed: true });
    // wait for A to see the close through the owner's view: an anonymous request sent while A still
    // had the port public would wake the sandbox, which is what a public port is for
    await waitFor(
      "replica A no longer lists the closed port",
      async () => (await api(rt, "GET", `/v1/sandboxes/${sid}/exposed-ports`)).json().ports?.length === 0,
      10_000,
    );
    expect(await status(url(rt))).toBe(401);
    expect(await phase()).toBe("Paused");
    // the close is what the woken sandbox has
    expect((await api(rt, "POST", `/v1/sandboxes/${sid}/resume`)).status).toBe(200);
    expect((await api(rt, "GET", `/v1/sandboxes/${sid}/exposed-ports`)).json().ports).toEqual([]);
    expect(await status(url(rt))).toBe(401);
  }, 300_000);

  it("an exposure made while a resume runs is neither refused nor lost", async () => {
    const sid = await sandbox(rt, { metadata: { "sbx.post-resume": START_SERVER(8000) } });
    await sh(rt, sid, "cat > /workspace/port-server.py", SERVER_PY);
    expect((await api(rt, "POST", `/v1/sandboxes/${sid}/pause`)).status).toBe(200);
    // the resume runs on replica B, the exposure is written through A while it does
    const resumed = api(b, "POST", `/v1/sandboxes/${sid}/resume`);
    const opened = await api(rt, "PUT", `/v1/sandboxes/${sid}/exposed-ports/8000`, { public: true });
    expect(opened.status, opened.text).toBe(200);
    expect((await resumed).status).toBe(200);
    expect((await api(rt, "GET", `/v1/sandboxes/${sid}`)).json().phase).toBe("Running");
    await waitFor(
      "the woken sandbox's port answers anonymously",
      async () => (await status(`${rt.url}/v1/sandboxes/${sid}/ports/8000/echo`)) === 200,
      20_000,
    );
  }, 300_000);

  it("/v1 hides the reserved keys and refuses them from callers, naming the key", async () => {
    await api(rt, "PUT", `/v1/sandboxes/${id}/exposed-ports/8000`, { public: true });
    const shown = await api(rt, "GET", `/v1/sandboxes/${id}`);
    expect(Object.keys(shown.json().metadata).filter((k) => k.startsWith(PORTS_METADATA_PREFIX))).toEqual([]);
    const forged = await api(rt, "PATCH", `/v1/sandboxes/${id}`, { metadata: { "sbx.ports.9000": '{"public":true}' } });
    expect(forged.status).toBe(400);
    expect(forged.json().error.message).toContain("metadata.sbx.ports.9000");
    expect(forged.json().error.message).toContain("reserved for port exposures");
    const created = await api(rt, "POST", "/v1/sandboxes", { size: "nano", metadata: { "sbx.ports.1": "x" } });
    expect(created.status).toBe(400);
    await api(rt, "DELETE", `/v1/sandboxes/${id}/exposed-ports/8000`);
  });

  it("a replica shutting down ends the relayed connections still open instead of waiting on them", async () => {
    const c = await rt.replica("kexpo-c");
    const ws = new WebSocket(at(c, "/ws").replace("http", "ws"), { headers: auth("alice") });
    ws.on("error", () => undefined);
    await new Promise((r) => ws.once("open", r));
    const closedWs = new Promise((r) => ws.once("close", r));
    // the websocket stays open: only the service can end it here
    const outcome = await Promise.race([
      c.close().then(() => "closed"),
      new Promise((r) => setTimeout(() => r("still waiting after 20 s"), 20_000)),
    ]);
    // unstick a close that waits, so a failure here does not hold the suite's own close too
    if (outcome !== "closed") ws.close();
    expect(outcome).toBe("closed");
    await closedWs;
  }, 60_000);
});
