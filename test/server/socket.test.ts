// The service on a real socket (startService, port 0) driven by the HTTP client that the CLI
// uses: output arrives while the command runs, a client that goes away kills the command,
// domain errors come back as the same error types, and close() drains and stops everything.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HttpManager } from "../../runtime/client/http.ts";
import { systemClock } from "../../runtime/core/clock.ts";
import { CapacityError, SbxError } from "../../runtime/core/errors.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import type { Sandbox } from "../../runtime/core/types.ts";
import { createLocalPlatform } from "../../runtime/local/platform.ts";
import { type Service, startService } from "../../runtime/server/service.ts";
import { localConfig, TOKENS, testTokens } from "../support/local.ts";

let svc: Service;
let alice: HttpManager;
let cleanup: () => void;
let catalogPath: string;

async function collect(session: Awaited<ReturnType<HttpManager["exec"]>>) {
  let stdout = "";
  let stderr = "";
  session.stdout.on("data", (c) => (stdout += c));
  session.stderr.on("data", (c) => (stderr += c));
  const result = await session.result;
  return { stdout, stderr, result };
}

beforeAll(async () => {
  const made = localConfig({ budget: { cpu: "300m", memory: "8Gi" } });
  cleanup = made.cleanup;
  catalogPath = join(made.stateDir, "catalog.json");
  writeFileSync(catalogPath, JSON.stringify({ base: "host" }));
  const config = { ...made.config, catalogPath };
  const logger = silentLogger();
  svc = await startService({
    config,
    tokens: testTokens(),
    logger,
    clock: systemClock,
    platform: createLocalPlatform(config, { logger, clock: systemClock }),
    port: 0,
    drainMs: 2000,
  });
  alice = new HttpManager({ server: svc.url, token: TOKENS.alice });
});
afterAll(async () => {
  await svc?.close();
  cleanup?.();
});

describe("service over a socket with the HTTP client", () => {
  it("streams output while the command runs and returns its exit code", async () => {
    const s = await alice.create({ owner: "ignored", profile: "base", size: "nano" });
    await alice.wait("", s.id, { timeoutMs: 30_000 });
    // the command waits for a file the test creates only once the first line has arrived: it
    // can only end if its output streamed while it ran (no clock involved)
    const gate = `/tmp/gate-${Date.now()}`;
    const session = await alice.exec("", s.id, {
      command: ["sh", "-c", `echo first; until [ -e ${gate} ]; do sleep 0.02; done; echo second >&2; exit 3`],
      timeoutMs: 30_000,
    });
    const opened = new Promise((resolve, reject) =>
      session.stdout.once("data", () =>
        alice
          .exec("", s.id, { command: ["touch", gate] })
          .then((t) => t.result)
          .then(resolve, reject),
      ),
    );
    const { stdout, stderr, result } = await collect(session);
    await opened;
    expect(stdout).toBe("first\n");
    expect(stderr).toBe("second\n");
    expect(result).toMatchObject({ exitCode: 3, timedOut: false });
    await alice.kill("", s.id);
  });

  it("a client that goes away kills the command and everything it started", async () => {
    const s = await alice.create({ owner: "", profile: "base", size: "nano" });
    await alice.wait("", s.id, { timeoutMs: 30_000 });
    const session = await alice.exec("", s.id, { command: ["sh", "-c", "sleep 300 & echo started; wait"] });
    await new Promise((r) => session.stdout.once("data", r));
    session.kill();
    await expect(session.result).rejects.toThrow();
    // the server noticed the disconnect and killed the command's processes
    let left = "";
    // the bound is a safety net for a loaded machine (the kill is event-driven), not the assertion
    for (const end = Date.now() + 30_000; Date.now() < end; ) {
      const ps = await collect(
        await alice.exec("", s.id, { command: ["sh", "-c", "ps -eo args | grep -c '^sleep 300' || true"] }),
      );
      left = ps.stdout.trim();
      if (left === "0") break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(left).toBe("0");
    await alice.kill("", s.id);
  });

  it("rebuilds domain errors: 404, 400 naming the field, 429 with its retry-after", async () => {
    await expect(alice.get("", "sbx-aaaaaaaaaaaaaaaa")).rejects.toMatchObject({ code: "not_found" });
    await expect(alice.create({ owner: "", profile: "base", size: "huge" })).rejects.toMatchObject({
      code: "validation",
      details: { field: "size" },
    });
    const made = [];
    for (let i = 0; i < 3; i++) made.push(await alice.create({ owner: "", profile: "base", size: "nano" }));
    const err = await alice.create({ owner: "", profile: "base", size: "nano" }).catch((e) => e);
    expect(err).toBeInstanceOf(CapacityError);
    expect((err as CapacityError).retryAfterSeconds).toBeGreaterThan(0);
    for (const s of made) await alice.kill("", s.id);
    const wrong = new HttpManager({ server: svc.url, token: "nope" });
    const unauth = await wrong.list({ owner: "" }).catch((e) => e);
    expect(unauth).toBeInstanceOf(SbxError);
    expect(unauth.code).toBe("unauthenticated");
  });

  it("a new profile in the catalog file is usable without a restart", async () => {
    await expect(alice.create({ owner: "", profile: "data", size: "nano" })).rejects.toThrow("use one of: base");
    writeFileSync(catalogPath, JSON.stringify({ base: "host", data: "host" }));
    let created: Sandbox | undefined;
    // the watch reloads within its 50 ms debounce; the bound is a safety net for a loaded machine
    for (const end = Date.now() + 30_000; Date.now() < end && !created; ) {
      created = await alice.create({ owner: "", profile: "data", size: "nano" }).catch(() => undefined);
      if (!created) await new Promise((r) => setTimeout(r, 100));
    }
    expect(created?.profile).toBe("data");
    await alice.kill("", created!.id);
  });
});

describe("graceful shutdown", () => {
  it("stops accepting, lets requests drain for drainMs, then cuts long streams and closes the backend", async () => {
    const made = localConfig();
    const logger = silentLogger();
    const own = await startService({
      config: made.config,
      tokens: testTokens(),
      logger,
      clock: systemClock,
      platform: createLocalPlatform(made.config, { logger, clock: systemClock }),
      port: 0,
      drainMs: 500,
    });
    try {
      const client = new HttpManager({ server: own.url, token: TOKENS.alice });
      const s = await client.create({ owner: "", profile: "base", size: "nano" });
      await client.wait("", s.id, { timeoutMs: 30_000 });
      const session = await client.exec("", s.id, { command: ["sleep", "60"] });
      const outcome = session.result.then(
        () => "finished",
        () => "cut",
      );
      const t0 = Date.now();
      await own.close();
      // drainMs is 0.5 s and the command sleeps 60 s: generous for a busy machine, still telling
      expect(Date.now() - t0).toBeLessThan(45_000);
      expect(await outcome).toBe("cut");
      // nothing answers any more
      await expect(client.list({ owner: "" })).rejects.toMatchObject({ code: "upstream" });
    } finally {
      await own.close();
      made.cleanup();
    }
  });
});

describe("following logs", () => {
  it("answers at once even before any log line, and stops when the client goes away", async () => {
    const s = await alice.create({ owner: "", profile: "base", size: "nano" });
    await alice.wait("", s.id, { timeoutMs: 30_000 });
    const t0 = Date.now();
    const stream = await alice.logs("", s.id, { follow: true });
    // held until a log line, it would hang to the test's timeout; the bound is generous
    expect(Date.now() - t0).toBeLessThan(30_000);
    stream.destroy();
    await alice.kill("", s.id);
  });
});
