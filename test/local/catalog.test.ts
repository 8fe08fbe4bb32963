// One catalog reader: the local backend's warm pool finds its images where the Manager does
// (config.catalog merged with the catalogPath file), on real local sandboxes.
import fs from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { buildManager } from "../../runtime/backends.ts";
import { systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import type { Backend, Sandbox } from "../../runtime/core/types.ts";
import { createLocalBackend } from "../../runtime/local/backend.ts";
import { localConfig, spec, tempStateDir } from "./harness.ts";

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A state dir with a catalog file that names a profile config.catalog does not have. */
function setup() {
  const stateDir = tempStateDir();
  const catalogPath = path.join(stateDir, "catalog.json");
  fs.writeFileSync(catalogPath, JSON.stringify({ tools: "host" }));
  const config = localConfig(stateDir, {
    catalog: { base: "host" },
    catalogPath,
    warmPool: [{ profile: "tools", size: "nano", count: 1 }],
  });
  cleanups.push(async () => fs.rmSync(stateDir, { recursive: true, force: true }));
  return config;
}

/** Claims a warm slot for the file-only profile, polling (generous bound: a slow start on a busy machine). */
async function claimWarm(backend: Backend, config: ReturnType<typeof setup>): Promise<Sandbox> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const got = await backend.claim(spec(config, { image: { profile: "tools", image: "host" } }));
    if (got) return got;
    if (Date.now() > deadline) throw new Error("no warm slot for profile tools (from catalogPath) within 30 s");
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("the local backend reads the one catalog", () => {
  it("a warm pool on a profile that only the catalogPath file names fills, through the composition root", async () => {
    const config = setup();
    const { manager, backend, catalog } = await buildManager(config, { logger: silentLogger(), clock: systemClock });
    cleanups.push(() => manager.close());
    await manager.start({ reaper: false });
    expect(catalog.imageOf("tools")).toBe("host");
    expect(await claimWarm(backend, config)).toMatchObject({ warm: true, phase: "Running" });
  });

  it("a backend built on its own (tests, benchmarks) reads config.catalog and catalogPath too", async () => {
    const config = setup();
    const backend = createLocalBackend(config, { logger: silentLogger(), clock: systemClock });
    cleanups.push(() => backend.close());
    await backend.start();
    expect(await claimWarm(backend, config)).toMatchObject({ warm: true, phase: "Running" });
  });
});
