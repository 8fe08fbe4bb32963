// The rest of the Must-show list on the Kubernetes backend, with the REAL e2b SDK through
// startService (as `npm start` wires it) against the test control plane: pause, then connect
// resumes with the files intact (snapshots to the suite's registry), a pause of a paused sandbox
// returns false, and over budget is the SDK's RateLimitError after its retries. The budget has
// room for three nano sandboxes, no more.
import { RateLimitError, Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Service } from "../../../runtime/server/service.ts";
import { registryUrl } from "../../support/cluster.ts";
import { TOKENS } from "../../support/local.ts";
import { startTestService, type TestService } from "../runtime/service-support.ts";

let t: TestService;
let service: Service;
/** 429s the create route answered: the SDK's retries show up here */
let rejectedCreates = 0;

const sdk = (extra: Record<string, unknown> = {}) => ({
  apiKey: TOKENS.alice,
  apiUrl: service.url,
  sandboxUrl: service.url,
  requestTimeoutMs: 150_000,
  ...extra,
});

beforeAll(async () => {
  t = await startTestService("e2b-life", (ns) => ({
    budget: { cpu: "300m", memory: "4Gi" },
    snapshots: { registry: registryUrl(), repository: `snap-${ns.sandboxes}` },
  }));
  ({ service } = t);
  // the app already listens (no more hooks): watch the node server's answers instead
  service.app.server.on("request", (req, res) => {
    res.once("finish", () => {
      if (req.url === "/v2/sandboxes" && req.method === "POST" && res.statusCode === 429) rejectedCreates++;
    });
  });
}, 240_000);

afterAll(async () => {
  await t?.close();
});

describe("E2B lifecycle with the real SDK (Kubernetes platform)", () => {
  it("pause, then connect resumes with the files intact; pausing a paused one returns false", async () => {
    const s = await Sandbox.create("base", { ...sdk(), timeoutMs: 600_000 });
    await s.files.write("/workspace/kept.txt", "kept across pause\n");
    // read back first, so a failure below says whether the write or the pause and resume lost it
    expect(await s.files.read("/workspace/kept.txt")).toBe("kept across pause\n");
    expect(await s.pause()).toBe(true);
    expect((await s.getInfo()).state).toBe("paused");
    expect(await s.pause()).toBe(false);
    expect(await s.isRunning()).toBe(false);

    const again = await Sandbox.connect(s.sandboxId, { ...sdk(), timeoutMs: 300_000 });
    expect((await again.getInfo()).state).toBe("running");
    expect(await again.files.read("/workspace/kept.txt")).toBe("kept across pause\n");
    expect((await again.commands.run("cat /workspace/kept.txt")).stdout).toBe("kept across pause\n");
    expect(await again.kill()).toBe(true);
  });

  it("over budget is the SDK's RateLimitError, after its retry", async () => {
    const held = await Promise.all([1, 2, 3].map(() => Sandbox.create("base", sdk())));
    try {
      rejectedCreates = 0;
      // retries: 1 and admission's Retry-After keep this to one wait
      const err = await Sandbox.create("base", sdk({ retries: 1 })).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RateLimitError);
      expect(rejectedCreates).toBe(2);
    } finally {
      await Promise.all(held.map((s) => s.kill()));
    }
  });
});
