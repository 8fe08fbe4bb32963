// `sbx expose` and `sbx port-forward` against the real service on the real local backend.
import net from "node:net";
import { afterAll, beforeAll, expect, it } from "vitest";
import { runCli } from "../../runtime/cli/main.ts";
import { portForward } from "../../runtime/cli/ports.ts";
import { cliIo, type PortRuntime, sandbox, startPortRuntime, startServer } from "../server/ports-support.ts";
import { TOKENS } from "../support/local.ts";

let rt: PortRuntime;
let id: string;
beforeAll(async () => {
  rt = await startPortRuntime();
  id = await sandbox(rt);
  await startServer(rt, id, 8000);
}, 120_000);
afterAll(async () => {
  await rt?.close();
});

const io = cliIo;
const env = () => ({ SBX_SERVER: rt.url, SBX_TOKEN: TOKENS.alice });

it("sbx expose --public prints the URL, which then works without a token; --close ends it", async () => {
  const o = io();
  expect(await runCli(["expose", id, "8000", "--public"], { env: env(), io: o.io })).toBe(0);
  const url = o.out().trim();
  expect(url).toBe(`${rt.url}/v1/sandboxes/${id}/ports/8000/`);
  expect((await fetch(`${url}echo`)).status).toBe(200);
  const c = io();
  expect(await runCli(["expose", id, "8000", "--close"], { env: env(), io: c.io })).toBe(0);
  expect((await fetch(`${url}echo`)).status).toBe(401);
  // a bad port is exit 2 naming it
  const bad = io();
  expect(await runCli(["expose", id, "70000"], { env: env(), io: bad.io })).toBe(2);
  expect(bad.err()).toContain('PORT: invalid value "70000"');
});

it("sbx expose without --public prints a per-port token once", async () => {
  const o = io();
  expect(await runCli(["expose", id, "8000"], { env: env(), io: o.io })).toBe(0);
  const token = /token \(shown once\): (\S+)/.exec(o.err())?.[1];
  expect(token).toMatch(/^sbx_/);
  expect((await fetch(`${o.out().trim()}echo`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
});

it("sbx port-forward relays raw TCP from a local loopback port to the sandbox's port", async () => {
  const o = io();
  const ac = new AbortController();
  const done = portForward({ env: env(), io: o.io }, [id, ":8000"], ac.signal);
  for (let i = 0; i < 100 && !o.out().includes("Forwarding"); i++) await new Promise((r) => setTimeout(r, 20));
  const port = Number(/:(\d+) ->/.exec(o.out())?.[1]);
  const answer = await new Promise<string>((resolve, reject) => {
    const s = net.connect(port, "127.0.0.1", () => s.write("GET /echo HTTP/1.0\r\nHost: inside\r\n\r\n"));
    let text = "";
    s.on("data", (c) => (text += c));
    s.on("end", () => resolve(text));
    s.on("error", reject);
  });
  expect(answer).toMatch(/^HTTP\/1\.[01] 200/);
  // a raw tunnel: the request reached the server exactly as written, our token not in it
  expect(answer).toContain('"host": "inside"');
  expect(answer).not.toContain("authorization");
  ac.abort();
  expect(await done).toBe(0);
});
