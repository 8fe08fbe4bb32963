// The per-file environment of the snapshot tests: one real registry per file, a fresh root
// directory per test, and every compute process the test's DirBackend started killed after it.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, beforeEach } from "vitest";
import { startRegistry, type TestRegistry } from "../support/registry.ts";
import { DirBackend } from "./dir-backend.ts";

export interface SnapshotTestEnv {
  registry: TestRegistry;
  root: string;
}

export function snapshotTestEnv(prefix: string): SnapshotTestEnv {
  const env = {} as SnapshotTestEnv;
  beforeAll(async () => {
    env.registry = await startRegistry();
  });
  afterAll(async () => {
    await env.registry?.stop();
  });
  beforeEach(async () => {
    env.root = await mkdtemp(join(tmpdir(), prefix));
  });
  afterEach(async () => {
    await new DirBackend(join(env.root, "sandboxes")).killAll();
    await rm(env.root, { recursive: true, force: true });
  });
  return env;
}
