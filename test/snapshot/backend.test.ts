// The pause/resume service as its callers see it: paused sandboxes in the view, the auto-resume
// decision on exec (the service resumes, or the installed wake does: the Manager's), and progress
// reaching every caller of a pause or resume.
import { randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { CapacityError, ConflictError, HTTP_STATUS } from "../../runtime/core/errors.ts";
import type { ExecSession, TransferProgress } from "../../runtime/core/types.ts";
import { pauseCaller } from "../support/pause.ts";
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
  const backend = pauseCaller(f.backend, f.snapshotter);
  const spec = makeSpec(id, metadata);
  f.specs.set(id, spec);
  return { f, backend, spec };
}

describe("SnapshottingBackend", () => {
  it("shows a paused sandbox as Paused holding no compute, and lists it", async () => {
    const { f, backend, spec } = setup("sb-view");
    await backend.provision(spec);
    const paused = await backend.pause("sb-view");
    expect(paused).toMatchObject({
      id: "sb-view",
      owner: "alice",
      phase: "Paused",
      ready: false,
      cpuRequestMillis: 0,
      memoryRequestBytes: 0,
    });
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

  it("reports progress per path to the caller, and to a caller that joined a resume another call started", async () => {
    const { f, backend, spec } = setup("sb-prog");
    await backend.provision(spec);
    await writeFile(join(f.backend.fsRoot("sb-prog"), "workspace/big.bin"), randomBytes(3 << 20));
    const paused: TransferProgress[] = [];
    await backend.pause("sb-prog", { onProgress: (p) => paused.push(p) });
    const ws = paused.filter((p) => p.path === "/workspace");
    expect(ws.length).toBeGreaterThan(0);
    expect(ws.every((p) => p.op === "pause" && p.totalBytes === undefined)).toBe(true);
    expect(ws.map((p) => p.bytes)).toEqual([...ws.map((p) => p.bytes)].sort((a, b) => a - b));
    const layer = (await f.snapshotter.status("sb-prog"))!.snapshot!.layers.find((l) => l.path === "/workspace")!;
    expect(ws.at(-1)!.bytes).toBe(layer.size);

    const first: TransferProgress[] = [];
    const joined: TransferProgress[] = [];
    // the second call joins the first's operation (the snapshotter shares it); both see the bytes
    const [a, b] = await Promise.all([
      backend.resume("sb-prog", { onProgress: (p) => first.push(p) }),
      backend.resume("sb-prog", { onProgress: (p) => joined.push(p) }),
    ]);
    expect(a.phase).toBe("Running");
    expect(b.phase).toBe("Running");
    for (const seen of [first, joined]) {
      const last = seen.filter((p) => p.path === "/workspace").at(-1)!;
      expect(last).toEqual({ op: "resume", path: "/workspace", bytes: layer.size, totalBytes: layer.size });
    }
    // listeners are dropped when their call ends: a later pause reports to nobody from before
    const before = first.length;
    await backend.pause("sb-prog");
    expect(first.length).toBe(before);
    f.oci.close();
  });

  it("routes auto-resume to the installed resumer, which decides (here: over budget) and can refuse", async () => {
    const { f, backend, spec } = setup("sb-route");
    await backend.provision(spec);
    await writeFile(join(f.backend.fsRoot("sb-route"), "workspace/m"), "routed\n");
    await backend.pause("sb-route");
    const calls: string[] = [];
    let room = false;
    backend.routeAutoResume(async (id, op) => {
      calls.push(`${id} ${op}`);
      if (!room) throw new CapacityError(`${op}: no room`, 3);
      await backend.resume(id);
    });
    const refused = await backend.exec("sb-route", { command: ["true"] }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(CapacityError);
    expect((await backend.describe("sb-route"))!.phase).toBe("Paused");
    room = true;
    const r = await output(await backend.exec("sb-route", { command: ["sh", "-c", 'cat "$SBX_FS/workspace/m"'] }));
    expect(r).toEqual({ stdout: "routed\n", exitCode: 0 });
    expect(calls).toEqual(["sb-route exec", "sb-route exec"]);
    // without auto-resume the 409 comes before the resumer is asked
    const off = setup("sb-route-off", { "sbx.auto-resume": "false" });
    await off.backend.provision(off.spec);
    await off.backend.pause("sb-route-off");
    off.backend.routeAutoResume(async (id, op) => void calls.push(`${id} ${op}`));
    await expect(off.backend.getArchive("sb-route-off", "/workspace")).rejects.toThrow(
      "download files: sandbox sb-route-off is paused and does not allow auto-resume",
    );
    expect(calls).toHaveLength(2);
    f.oci.close();
    off.f.oci.close();
  });
});
