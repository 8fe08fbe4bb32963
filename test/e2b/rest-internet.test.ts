// allowInternetAccess through the real SDK on the local platform: false is what every sbx
// sandbox is (no network), so it is accepted; true is refused with a 400 that names the setting
// that would decide it (an operator-defined egress policy), and creates nothing.
import { Sandbox, SandboxError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRuntime, startLocalRuntime, TOKENS } from "../support/local.ts";

let rt: LocalRuntime;
let url: string;

beforeAll(async () => {
  rt = await startLocalRuntime();
  url = await rt.app.listen({ host: "127.0.0.1", port: 0 });
}, 60_000);

afterAll(async () => {
  await rt?.close();
});

const opts = () => ({ apiKey: TOKENS.alice, apiUrl: url, sandboxUrl: url, requestTimeoutMs: 120_000 });

describe("Sandbox.create allowInternetAccess", () => {
  it("false is accepted: the sandbox runs commands, and has no network but loopback", async () => {
    const sbx = await Sandbox.create("base", { ...opts(), allowInternetAccess: false });
    try {
      // the interfaces the kernel shows the sandbox: loopback only
      const r = await sbx.commands.run("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '");
      expect(r.stdout.trim().split("\n")).toEqual(["lo"]);
    } finally {
      await sbx.kill();
    }
  }, 120_000);

  it("true is a 400 naming the field and the egress setting that decides it; nothing is created", async () => {
    const before = (await Sandbox.list(opts()).nextItems()).length;
    const err = await Sandbox.create("base", { ...opts(), allowInternetAccess: true }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxError);
    expect(err).toMatchObject({ statusCode: 400 });
    const message = (err as Error).message;
    expect(message).toContain("allow_internet_access: invalid value true");
    expect(message).toContain("egress policy");
    expect(message).toContain("`egress` config, sbx:egress.policies");
    expect((await Sandbox.list(opts()).nextItems()).length).toBe(before);
  }, 60_000);
});
