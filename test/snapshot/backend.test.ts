// SnapshottingBackend: what the Manager sees of paused sandboxes, and auto-resume on exec.
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ConflictError, HTTP_STATUS } from "../../runtime/core/errors.ts";
import type { ExecSession } from "../../runtime/core/types.ts";
import { SnapshottingBackend } from "../../runtime/snapshot/backend.ts";
import { snapshotTestEnv } from "./env.ts";
import { makeFixture, makeSpec } from "./fixture.ts";

const env = snapshotTestEnv("sbx-snapb-");

async function output(s: ExecSession): Promise<{ stdout: string; exitCode: number }> {
  let stdout = "";
  s.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  s.stderr.resume();
  const r = await s.result;
  return { stdout, exitCode: r.exitCode };
}

function setup(id: string, metadata: Record<string, string> = {}) {
  const f = makeFixture(env.root, env.registry.url);
  const backend = new SnapshottingBackend(f.backend, f.snapshotter);
  const spec = makeSpec(id, metadata);
  f.specs.set(id, spec);
  return { f, backend, spec };
}

describe("SnapshottingBackend", () => {
  it("shows a paused sandbox as Paused holding no compute, and lists it", async () => {
    const { f, backend, spec } = setup("sb-view");
    await backend.provision(spec);
    const paused = await backend.pause("sb-view");
    expect(paused).toMatchObject({ id: "sb-view", owner: "alice", phase: "Paused", ready: false, cpuRequestMillis: 0, memoryRequestBytes: 0 });
    expect((await backend.list()).map((s) => [s.id, s.phase])).toEqual([["sb-view", "Paused"]]);
    const resumed = await backend.resume("sb-view");
    expect(resumed).toMatchObject({ phase: "Running", ready: true, cpuRequestMillis: 100 });
    expect((await backend.describe("sb-view"))!.phase).toBe("Running");
    f.oci.close();
  });

  it("exec on a paused sandbox that allows auto-resume resumes it first and sees its files", async () => {
    const { f, backend, spec } = setup("sb-auto");
    await backend.provision(spec);
    await writeFile(join(f.backend.fsRoot("sb-auto"), "workspace/marker"), "marker-7f3a\n");
    await backend.pause("sb-auto");
    const r = await output(await backend.exec("sb-auto", { command: ["sh", "-c", 'cat "$SBX_FS/workspace/marker"'] }));
    expect(r).toEqual({ stdout: "marker-7f3a\n", exitCode: 0 });
    expect((await backend.describe("sb-auto"))!.phase).toBe("Running");
    f.oci.close();
  });

  it("exec on a paused sandbox without auto-resume is a 409 naming the fix, and it stays paused", async () => {
    const { f, backend, spec } = setup("sb-noauto", { "sbx.auto-resume": "false" });
    await backend.provision(spec);
    await backend.pause("sb-noauto");
    const err = await backend.exec("sb-noauto", { command: ["true"] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConflictError);
    expect(HTTP_STATUS[(err as ConflictError).code]).toBe(409);
    expect((err as Error).message).toBe(
      "exec: sandbox sb-noauto is paused and does not allow auto-resume: resume it first (sbx resume sb-noauto), or create sandboxes with metadata sbx.auto-resume=true",
    );
    expect((await backend.describe("sb-noauto"))!.phase).toBe("Paused");
    f.oci.close();
  });

  it("delete removes the sandbox and its snapshot", async () => {
    const { f, backend, spec } = setup("sb-del");
    await backend.provision(spec);
    const rec = await f.snapshotter.pause("sb-del");
    await backend.delete("sb-del");
    expect(await backend.describe("sb-del")).toBeUndefined();
    expect(await f.oci.headManifest("sbx-snapshots", rec.snapshot!.tag)).toBeUndefined();
    f.oci.close();
  });
});
