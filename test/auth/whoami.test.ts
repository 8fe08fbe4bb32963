// `sbx whoami` over a real socket: SBX_TOKEN holding a JWT from a configured issuer prints the
// owner and team it maps to; a static token prints its owner; a refused JWT exits 3 (unauthenticated)
// with the failed check, and the token appears in neither output.
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../../runtime/cli/main.ts";
import { TOKENS } from "../support/local.ts";
import { TestIssuer } from "./issuer-server.ts";
import { type AuthApp, issuerEntry, startAuthApp } from "./support.ts";

let issuer: TestIssuer;
let t: AuthApp;
let url: string;

beforeAll(async () => {
  issuer = await new TestIssuer().start();
  t = await startAuthApp([issuerEntry("corp", issuer.url, { team: { claim: "groups", stripPrefix: "sbx-" } })]);
  url = await t.app.listen({ host: "127.0.0.1", port: 0 });
});
afterAll(async () => {
  await t?.close();
  await issuer?.close();
});

function sink() {
  let text = "";
  const stream = new Writable({
    write: (c, _e, cb) => {
      text += c.toString();
      cb();
    },
  });
  return { stream, text: () => text };
}

async function sbx(token: string, ...args: string[]) {
  const out = sink();
  const err = sink();
  const code = await runCli(["whoami", ...args], {
    env: { SBX_SERVER: url, SBX_TOKEN: token },
    io: { stdout: out.stream, stderr: err.stream, stdin: process.stdin },
  });
  return { code, stdout: out.text(), stderr: err.text() };
}

describe("sbx whoami", () => {
  it("prints the owner and team a JWT maps to", async () => {
    const r = await sbx(issuer.token({ sub: "dana", groups: ["sbx-research"] }));
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^owner\s+dana$/m);
    expect(r.stdout).toMatch(/^team\s+research$/m);
    expect(r.stdout).toMatch(/^via\s+issuer corp$/m);
  });

  it("--json gives the same as data", async () => {
    const r = await sbx(issuer.token({ sub: "dana" }), "--json");
    expect(JSON.parse(r.stdout)).toMatchObject({ owner: "dana", via: "corp" });
  });

  it("prints a static token's owner", async () => {
    const r = await sbx(TOKENS.bob);
    expect(r.stdout).toMatch(/^owner\s+bob$/m);
    expect(r.stdout).toMatch(/^team\s+-$/m);
  });

  it("exits 3 on a refused JWT, naming the check and not the token", async () => {
    const token = issuer.token({ aud: "not-us" });
    const r = await sbx(token);
    expect(r.code).toBe(3);
    expect(r.stderr).toContain("(wrong_audience)");
    expect(r.stderr + r.stdout).not.toContain(token);
  });
});
