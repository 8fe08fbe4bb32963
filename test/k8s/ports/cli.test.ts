// The host form {port}-{id}.{domain}, `sbx expose` and `sbx port-forward` on the Kubernetes
// backend (over the pod's command channel), against the test control plane: the same code as
// locally (test/server/ports.test.ts, test/cli/ports.test.ts) above a different openPort.
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../../../runtime/cli/main.ts";
import { portForward } from "../../../runtime/cli/ports.ts";
import { cliIo, rawGet } from "../../server/ports-support.ts";
import { waitFor } from "../../support/cluster.ts";
import { auth, TOKENS } from "../../support/local.ts";
import { type K8sPortRuntime, startK8sPortSandbox } from "./support.ts";

const DOMAIN = "sbx.test";
let rt: K8sPortRuntime;
let id: string;

beforeAll(async () => {
  ({ rt, id } = await startK8sPortSandbox("kportcli", { ports: { domain: DOMAIN } }));
}, 300_000);

afterAll(async () => {
  await rt?.close();
});

const io = cliIo;
const env = () => ({ SBX_SERVER: rt.url, SBX_TOKEN: TOKENS.alice });

describe("ports by host and from the CLI on the Kubernetes backend", () => {
  it("the host form reaches the sandbox's server with the path untouched; another owner's token gets 404", async () => {
    const host = `8000-${id}.${DOMAIN}`;
    const res = await rawGet(rt.port, "/v1/sandboxes/anything?x=1", { host, ...auth("alice") });
    expect(res.status, res.body).toBe(200);
    const seen = JSON.parse(res.body) as { path: string; headers: Record<string, string> };
    expect(seen.path).toBe("/v1/sandboxes/anything?x=1");
    expect(seen.headers.host).toBe(host);
    expect((await rawGet(rt.port, "/echo", { host, ...auth("bob") })).status).toBe(404);
    expect((await rawGet(rt.port, "/echo", { host })).status).toBe(401);
  });

  it("sbx expose --public prints the host-form URL, which works without a token until --close", async () => {
    const o = io();
    expect(await runCli(["expose", id, "8000", "--public"], { env: env(), io: o.io })).toBe(0);
    const url = new URL(o.out().trim());
    expect(url.host).toBe(`8000-${id}.${DOMAIN}`);
    // no wildcard DNS here: the URL's host goes in the Host header to the service's own port
    const get = () => rawGet(rt.port, `${url.pathname}echo`, { host: url.host });
    expect((await get()).status).toBe(200);
    expect(await runCli(["expose", id, "8000", "--close"], { env: env(), io: io().io })).toBe(0);
    expect((await get()).status).toBe(401);
  });

  it("sbx port-forward relays raw TCP from a local port into the pod, twice over", async () => {
    const o = io();
    const ac = new AbortController();
    const done = portForward({ env: env(), io: o.io }, [id, ":8000"], ac.signal);
    await waitFor("the forward to listen", async () => o.out().includes("Forwarding"), 10_000);
    const port = Number(/:(\d+) ->/.exec(o.out())?.[1]);
    for (const n of [1, 2]) {
      const answer = await new Promise<string>((resolve, reject) => {
        const s = net.connect(port, "127.0.0.1", () => s.write(`GET /echo?n=${n} HTTP/1.0\r\nHost: inside\r\n\r\n`));
        let text = "";
        s.on("data", (c) => (text += c));
        s.on("end", () => resolve(text));
        s.on("error", reject);
      });
      expect(answer).toMatch(/^HTTP\/1\.[01] 200/);
      expect(answer).toContain(`"path": "/echo?n=${n}"`);
      expect(answer).not.toContain("authorization");
    }
    ac.abort();
    expect(await done).toBe(0);
  });
});
