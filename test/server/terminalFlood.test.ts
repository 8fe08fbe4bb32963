// 1,000 terminal websockets opened at once by one owner (issue 32's bad input), over a real socket
// on the local platform: the per-owner bound admits its number and answers every other handshake
// 429 before anything starts in the sandbox; nothing is a 5xx or a reset. Once the clients go,
// the sandbox's processes and this process's open file descriptors are back at their baseline,
// and a terminal opens as before.
import { readdirSync, readFileSync } from "node:fs";
import http from "node:http";
import type { Duplex } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { terminalQuery } from "../../runtime/core/terminal.ts";
import { auth, type LocalRuntime, parseExecFrames, startLocalRuntime } from "../support/local.ts";

const BOUND = 20;
let rt: LocalRuntime;
let base = "";
let id: string;

beforeAll(async () => {
  rt = await startLocalRuntime({ budget: { cpu: "400m", memory: "4Gi" } }, { terminals: { maxPerOwner: BOUND } });
  base = await rt.app.listen({ host: "127.0.0.1", port: 0 });
  id = (await rt.manager.create({ owner: "alice", profile: "base", size: "nano" })).id;
  await rt.manager.wait("alice", id, { timeoutMs: 60_000 });
}, 120_000);

afterAll(async () => {
  await rt?.close();
});

/** Polls until `ok()` returns a value; the bound is a safety net far above a normal wait, never the assertion. */
async function until<T>(what: string, ok: () => T | undefined | Promise<T | undefined>, ms = 60_000): Promise<T> {
  let last: T | undefined;
  for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 100))) {
    last = await ok();
    if (last !== undefined && last !== false) return last;
  }
  throw new Error(`${what}: not within ${ms} ms`);
}

type Answer = { kind: "open"; socket: Duplex } | { kind: "refused"; status: number; body: string };

/** One raw websocket handshake: the upgraded socket, kept open, or the plain refusal. */
function handshake(query: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}/v1/sandboxes/${id}/terminal?${query}`, {
      headers: {
        ...auth("alice"),
        connection: "Upgrade",
        upgrade: "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
      },
      agent: false,
    });
    req.on("response", (res) => {
      let body = "";
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ kind: "refused", status: res.statusCode ?? 0, body }));
      res.on("error", reject);
    });
    req.on("upgrade", (_res, socket) => {
      socket.on("error", () => undefined);
      resolve({ kind: "open", socket });
    });
    req.on("error", reject);
    req.end();
  });
}

const openFds = () => readdirSync("/proc/self/fd").length;

/** This process's soft limit on open files: each handshake holds two (client and service side). */
function fdLimit(): number {
  const line = readFileSync("/proc/self/limits", "utf8")
    .split("\n")
    .find((l) => l.startsWith("Max open files"));
  const soft = Number(line?.split(/\s{2,}/)[1]);
  return Number.isFinite(soft) ? soft : 1024;
}

async function processCount(): Promise<number> {
  const res = await rt.app.inject({
    method: "POST",
    url: `/v1/sandboxes/${id}/exec`,
    headers: auth("alice"),
    payload: { command: ["sh", "-c", "ls -d /proc/[0-9]* | wc -l"] },
  });
  return Number(parseExecFrames(res.body).stdout.trim());
}

describe("a flood of terminals", () => {
  it("1,000 at once (fewer under a lower fd limit): the bound opens, the rest are 429, nothing leaks", async () => {
    // one terminal first, so what the first one opens lazily is in the baseline
    const warm = await handshake(terminalQuery({ command: ["true"] }));
    if (warm.kind === "open") warm.socket.destroy();
    const procs = await until("the warm-up terminal gone", async () => {
      const a = await processCount();
      await new Promise((r) => setTimeout(r, 300));
      return a === (await processCount()) ? a : undefined;
    });
    const fds = openFds();
    // a machine with a low open-files limit gets as many as it can hold, said in the log
    const n = Math.min(1000, Math.floor((fdLimit() - fds - 200) / 2));
    if (n < 1000) console.log(`terminal flood: ${n} handshakes (the open-files limit is ${fdLimit()})`);
    expect(n, `the open-files limit (${fdLimit()}) leaves room for a flood of at least ${BOUND * 5}`).toBeGreaterThan(
      BOUND * 5,
    );

    const answers = await Promise.all(Array.from({ length: n }, () => handshake(terminalQuery({ command: ["cat"] }))));
    const open = answers.filter((a) => a.kind === "open");
    const refused = answers.filter((a): a is Extract<Answer, { kind: "refused" }> => a.kind === "refused");
    expect(open.length).toBe(BOUND);
    expect(refused.length).toBe(n - BOUND);
    expect(new Set(refused.map((r) => r.status))).toEqual(new Set([429]));
    expect(JSON.parse(refused[0].body).error.message).toContain(`the most one owner may have (${BOUND})`);

    for (const a of open) a.socket.destroy();
    await until("the sandbox back at its process count", async () =>
      (await processCount()) === procs ? true : undefined,
    );
    await until(`open fds back at ${fds} (now ${openFds()})`, () => (openFds() <= fds ? true : undefined));

    // and the service goes on: a terminal opens and runs
    const again = await until("a terminal opening again", async () => {
      const a = await handshake(terminalQuery({ command: ["sh", "-c", "echo back"] }));
      if (a.kind === "open") return a;
      expect(a.status).toBe(429); // the service may see the last closes a moment late
      return undefined;
    });
    const seen = await new Promise<string>((resolve) => {
      let text = "";
      again.socket.on("data", (c: Buffer) => {
        text += c.toString("latin1");
        if (text.includes("back")) resolve(text);
      });
    });
    expect(seen).toContain("back");
    again.socket.destroy();
  }, 180_000);
});
