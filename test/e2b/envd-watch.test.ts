// files.watchDir with the real SDK on the local platform (real sandboxes): the events the SDK
// reports for creates, writes, renames and removes, recursive watching, a missing directory,
// the per-owner cap on watchers, and a watcher whose client stops reading being cut. The service
// polls every 100 ms here (watch.ts); waits are generous bounds, never exact times.
import { request } from "node:http";
import { FileNotFoundError, type FilesystemEvent, RateLimitError, Sandbox } from "e2b";
import Fastify, { type FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { silentLogger } from "../../runtime/core/log.ts";
import { registerEnvd } from "../../runtime/server/e2b/envd/plugin.ts";
import { envdAccess } from "../../runtime/server/e2b/plugin.ts";
import { type LocalRuntime, startLocalRuntime, TOKENS } from "../support/local.ts";

let rt: LocalRuntime;
let sbx: Sandbox;
/** envd alone on the same Manager, polling fast and with small bounds */
let envd: FastifyInstance;
let envdUrl: string;

beforeAll(async () => {
  rt = await startLocalRuntime();
  const url = await rt.app.listen({ host: "127.0.0.1", port: 0 });
  envd = Fastify();
  registerEnvd(
    envd,
    { manager: rt.manager, access: envdAccess(rt.manager), logger: silentLogger() },
    { watch: { intervalMs: 100, maxPerOwner: 2, maxQueued: 50, stallMs: 300, unpolledMs: 1500 } },
  );
  envdUrl = await envd.listen({ host: "127.0.0.1", port: 0 });
  sbx = await Sandbox.create("base", { apiKey: TOKENS.alice, apiUrl: url, sandboxUrl: envdUrl, timeoutMs: 600_000 });
}, 120_000);

afterAll(async () => {
  await sbx?.kill().catch(() => undefined);
  envd?.server.closeAllConnections();
  rt?.app.server.closeAllConnections();
  await envd?.close();
  await rt?.close();
});

const summary = (events: FilesystemEvent[]) => events.map((e) => `${e.type} ${e.name}`);

describe("files.watchDir", () => {
  it("reports create, write, rename and remove of what happens in the directory", async () => {
    await sbx.files.makeDir("/workspace/w1");
    const events: FilesystemEvent[] = [];
    const h = await sbx.files.watchDir("/workspace/w1", (e) => void events.push(e), { timeoutMs: 0 });
    try {
      await sbx.files.write("/workspace/w1/a.txt", "hello");
      await expect.poll(() => summary(events), { timeout: 20_000 }).toEqual(["create a.txt", "write a.txt"]);
      await sbx.commands.run("echo more >> /workspace/w1/a.txt");
      await expect.poll(() => summary(events).slice(2), { timeout: 20_000 }).toEqual(["write a.txt"]);
      await sbx.files.rename("/workspace/w1/a.txt", "/workspace/w1/b.txt");
      await expect.poll(() => summary(events).slice(3), { timeout: 20_000 }).toEqual(["rename a.txt", "create b.txt"]);
      await sbx.files.remove("/workspace/w1/b.txt");
      await expect.poll(() => summary(events).slice(5), { timeout: 20_000 }).toEqual(["remove b.txt"]);
      // not recursive: inside a subdirectory is not this watch's business, the subdirectory itself is
      await sbx.files.write("/workspace/w1/sub/deep.txt", "x");
      await expect.poll(() => summary(events).slice(6), { timeout: 20_000 }).toEqual(["create sub"]);
    } finally {
      await h.stop();
    }
  });

  it("recursive: names relative to the watched directory", async () => {
    await sbx.files.makeDir("/workspace/w2/inner");
    const events: FilesystemEvent[] = [];
    const h = await sbx.files.watchDir("/workspace/w2", (e) => void events.push(e), { recursive: true, timeoutMs: 0 });
    try {
      await sbx.files.write("/workspace/w2/inner/n.txt", "");
      await expect.poll(() => summary(events), { timeout: 20_000 }).toEqual(["create inner/n.txt"]);
    } finally {
      await h.stop();
    }
  });

  it("a missing directory is FileNotFoundError; a file is not a directory to watch", async () => {
    await expect(sbx.files.watchDir("/workspace/nope", () => undefined)).rejects.toBeInstanceOf(FileNotFoundError);
    await sbx.files.write("/workspace/plain.txt", "x");
    await expect(sbx.files.watchDir("/workspace/plain.txt", () => undefined)).rejects.toThrow(/not a directory/);
  });

  it("at most maxPerOwner watchers at once; stopping one frees its place", async () => {
    const a = await sbx.files.watchDir("/workspace", () => undefined, { timeoutMs: 0 });
    const b = await sbx.files.watchDir("/tmp", () => undefined, { timeoutMs: 0 });
    const err = await sbx.files.watchDir("/workspace", () => undefined).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RateLimitError);
    expect(String((err as Error).message)).toContain("stop one");
    await a.stop();
    // the server sees the stream go when the connection closes: allow it a moment
    await expect
      .poll(
        async () => {
          const c = await sbx.files.watchDir("/workspace", () => undefined).catch(() => undefined);
          await c?.stop();
          return c !== undefined;
        },
        { timeout: 20_000 },
      )
      .toBe(true);
    await b.stop();
  });

  it("a watcher whose client stops reading is cut: its command ends and its place is freed", async () => {
    await sbx.files.makeDir("/workspace/w3");
    const held = await sbx.files.watchDir("/tmp", () => undefined, { timeoutMs: 0 }); // one of the two places
    // a client that takes the start event and then reads nothing, holding the connection open
    const token = (sbx as unknown as { envdAccessToken: string }).envdAccessToken;
    const json = Buffer.from(JSON.stringify({ path: "/workspace/w3" }));
    const head = Buffer.alloc(5);
    head.writeUInt32BE(json.length, 1);
    const req = request(`${envdUrl}/filesystem.Filesystem/WatchDir`, {
      method: "POST",
      headers: {
        "content-type": "application/connect+json",
        "e2b-sandbox-id": sbx.sandboxId,
        "x-access-token": token,
      },
    });
    req.on("error", () => undefined); // destroyed on purpose at the end
    const started = new Promise<void>((resolve) =>
      req.once("response", (res) => {
        res.on("error", () => undefined);
        res.once("data", () => {
          res.pause(); // from here on nothing is read
          resolve();
        });
      }),
    );
    req.end(Buffer.concat([head, json]));
    await started;
    try {
      // full: no third watcher
      await expect(sbx.files.watchDir("/workspace", () => undefined)).rejects.toBeInstanceOf(RateLimitError);
      // enough events to fill the connection's buffers (tens of MB: the kernel's alone take
      // several), so the service has to wait on the client: 10,000 long names made and removed,
      // four times, each time seen by the watch
      const name = "n".repeat(200);
      await sbx.commands.run(
        `cd /workspace/w3 && for round in 1 2 3 4; do seq 1 10000 | sed 's/^/${name}-/' | xargs touch; sleep 0.5; rm -f ./*; sleep 0.5; done`,
        { timeoutMs: 120_000 },
      );
      // the stalled watcher is cut: its place comes free
      await expect
        .poll(
          async () => {
            const c = await sbx.files.watchDir("/workspace", () => undefined).catch(() => undefined);
            await c?.stop();
            return c !== undefined;
          },
          { timeout: 30_000, interval: 500 },
        )
        .toBe(true);
    } finally {
      req.destroy();
      await held.stop();
    }
  });
});

describe("the polled form: CreateWatcher, GetWatcherEvents, RemoveWatcher", () => {
  const call = async (method: string, body: unknown) => {
    const token = (sbx as unknown as { envdAccessToken: string }).envdAccessToken;
    const res = await fetch(`${envdUrl}/filesystem.Filesystem/${method}`, {
      method: "POST",
      headers: { "content-type": "application/json", "e2b-sandbox-id": sbx.sandboxId, "x-access-token": token },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as any };
  };

  it("events since the last poll, then removed: its id is gone", async () => {
    await sbx.files.makeDir("/workspace/w4");
    const created = await call("CreateWatcher", { path: "/workspace/w4" });
    expect(created.status).toBe(200);
    const watcherId: string = created.body.watcherId;
    await sbx.files.write("/workspace/w4/p.txt", "");
    const seen: string[] = [];
    await expect
      .poll(
        async () => {
          const got = await call("GetWatcherEvents", { watcherId });
          seen.push(...(got.body.events ?? []).map((e: { type: string; name: string }) => `${e.type} ${e.name}`));
          return seen;
        },
        { timeout: 20_000, interval: 200 },
      )
      .toEqual(["EVENT_TYPE_CREATE p.txt"]);
    expect((await call("RemoveWatcher", { watcherId })).status).toBe(200);
    const after = await call("GetWatcherEvents", { watcherId });
    expect(after).toMatchObject({ status: 404, body: { code: "not_found" } });
    expect((await call("GetWatcherEvents", { watcherId: "made-up" })).status).toBe(404);
    expect((await call("CreateWatcher", { path: "/workspace/none" })).body.code).toBe("not_found");
  });

  it("a watcher nobody polls is cut after unpolledMs, and its place is freed", async () => {
    const a = await call("CreateWatcher", { path: "/workspace" });
    const b = await call("CreateWatcher", { path: "/tmp" });
    expect([a.status, b.status]).toEqual([200, 200]);
    expect((await call("CreateWatcher", { path: "/workspace" })).body.code).toBe("resource_exhausted");
    // b is polled, a is not (asking about a would count as polling it): a's place comes free
    let c: { status: number; body: any } | undefined;
    await expect
      .poll(
        async () => {
          await call("GetWatcherEvents", { watcherId: b.body.watcherId });
          c = await call("CreateWatcher", { path: "/workspace" });
          return c.status;
        },
        { timeout: 20_000, interval: 300 },
      )
      .toBe(200);
    expect((await call("GetWatcherEvents", { watcherId: a.body.watcherId })).status).toBe(404);
    expect((await call("GetWatcherEvents", { watcherId: b.body.watcherId })).status).toBe(200);
    await call("RemoveWatcher", { watcherId: c!.body.watcherId });
    await call("RemoveWatcher", { watcherId: b.body.watcherId });
  });
});
