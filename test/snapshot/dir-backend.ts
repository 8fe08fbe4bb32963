// A minimal Backend for exercising the Snapshotter across processes before (and besides) the
// real backends: a sandbox is a directory tree standing in for its writable paths plus a real
// `sleep` process standing in for its compute. Archives are made by real tar. All state is on
// disk, so a second process (after a crash) sees exactly what the first left behind.
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { PassThrough, type Readable } from "node:stream";
import { NotFoundError } from "../../runtime/core/errors.ts";
import type {
  Backend,
  ComputeRelease,
  ExecRequest,
  ExecSession,
  Sandbox,
  SandboxSpec,
} from "../../runtime/core/types.ts";

interface Meta {
  sandbox: Sandbox;
  pid?: number;
}

function alive(pid: number | undefined): boolean {
  if (!pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export class DirBackend implements Backend {
  readonly name = "dir";
  /** calls the methods below at call time, so a test can replace one of them */
  readonly compute: ComputeRelease = {
    releaseCompute: (id) => this.releaseCompute(id),
    adopt: (spec) => this.adopt(spec),
  };
  /** every process started for a sandbox (exec, tar): like a real sandbox's, they die with its compute */
  private readonly procs = new Map<string, Set<ChildProcess>>();
  constructor(readonly root: string) {}

  private track(id: string, child: ChildProcess): ChildProcess {
    const set = this.procs.get(id) ?? new Set<ChildProcess>();
    this.procs.set(id, set);
    set.add(child);
    child.once("close", () => set.delete(child));
    return child;
  }

  /** Kills the sandbox's processes and waits for them to exit, so nothing writes into a tree being removed. */
  private async stopProcs(id: string): Promise<void> {
    const running = [...(this.procs.get(id) ?? [])].filter((c) => c.exitCode === null && c.signalCode === null);
    await Promise.all(
      running.map(
        (c) =>
          new Promise<void>((resolve) => {
            c.once("close", () => resolve());
            c.kill("SIGKILL");
          }),
      ),
    );
  }

  /** host directory that stands for `/` inside the sandbox */
  fsRoot(id: string): string {
    return join(this.root, id, "fs");
  }

  private async meta(id: string): Promise<Meta | undefined> {
    try {
      return JSON.parse(await readFile(join(this.root, id, "meta.json"), "utf8")) as Meta;
    } catch {
      return undefined;
    }
  }

  private async writeMeta(id: string, m: Meta): Promise<void> {
    await writeFile(join(this.root, id, "meta.json"), JSON.stringify(m));
  }

  async start(): Promise<void> {}
  async claim(): Promise<Sandbox | undefined> {
    return undefined;
  }

  async provision(spec: SandboxSpec): Promise<Sandbox> {
    return this.adopt(spec);
  }

  async adopt(spec: SandboxSpec): Promise<Sandbox> {
    const fs = this.fsRoot(spec.id);
    for (const p of ["workspace", "tmp"]) await mkdir(join(fs, p), { recursive: true });
    const child = spawn("sleep", ["100000"], { detached: true, stdio: "ignore" });
    child.unref();
    const sandbox: Sandbox = {
      id: spec.id,
      owner: spec.owner,
      profile: spec.image.profile,
      size: spec.size.name,
      phase: "Running",
      ready: true,
      createdAt: spec.createdAt.toISOString(),
      expiresAt: new Date(spec.createdAt.getTime() + spec.ttlSeconds * 1000).toISOString(),
      metadata: spec.metadata,
      cpuRequestMillis: spec.size.cpuRequestMillis,
      memoryRequestBytes: spec.size.memoryRequestBytes,
      node: "local",
    };
    await this.writeMeta(spec.id, { sandbox, pid: child.pid });
    return sandbox;
  }

  async awaitReady(id: string): Promise<Sandbox> {
    const s = await this.describe(id);
    if (s?.phase !== "Running") throw new NotFoundError("sandbox", id);
    return s;
  }

  async exec(id: string, req: ExecRequest): Promise<ExecSession> {
    const s = await this.describe(id);
    if (s?.phase !== "Running") throw new NotFoundError("sandbox", id);
    const t0 = Date.now();
    const child = this.track(
      id,
      spawn(req.command[0], req.command.slice(1), {
        cwd: join(this.fsRoot(id), "workspace"),
        env: { ...process.env, ...req.env, SBX_FS: this.fsRoot(id) },
        stdio: ["ignore", "pipe", "pipe"],
      }),
    );
    let timedOut = false;
    const timer = req.timeoutMs
      ? setTimeout(() => {
          timedOut = true;
          child.kill("SIGKILL");
        }, req.timeoutMs)
      : undefined;
    const result = new Promise<{ exitCode: number; timedOut: boolean; oomKilled: boolean; durationMs: number }>(
      (resolve) =>
        child.on("close", (code) => {
          if (timer) clearTimeout(timer);
          resolve({
            exitCode: timedOut ? 124 : (code ?? 137),
            timedOut,
            oomKilled: false,
            durationMs: Date.now() - t0,
          });
        }),
    );
    return { stdout: child.stdout!, stderr: child.stderr!, result, kill: () => child.kill("SIGKILL") };
  }

  async getArchive(id: string, path: string): Promise<Readable> {
    const rel = path.replace(/^\/+/, "").replace(/\/+$/, "");
    const i = rel.lastIndexOf("/");
    const child = this.track(
      id,
      spawn(
        "tar",
        ["-C", join(this.fsRoot(id), i < 0 ? "" : rel.slice(0, i)), "-cf", "-", i < 0 ? rel : rel.slice(i + 1)],
        { stdio: ["ignore", "pipe", "pipe"] },
      ),
    );
    const out = new PassThrough();
    let err = "";
    child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
    child.stdout!.pipe(out, { end: false });
    child.on("close", (code) =>
      code === 0 ? out.end() : out.destroy(new Error(`tar of ${path} exited ${code}: ${err}`)),
    );
    return out;
  }

  async putArchive(id: string, dir: string, tar: Readable): Promise<void> {
    const target = join(this.fsRoot(id), dir);
    await mkdir(target, { recursive: true });
    const child = this.track(id, spawn("tar", ["-C", target, "-xf", "-"], { stdio: ["pipe", "ignore", "pipe"] }));
    let err = "";
    child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
    const exited = new Promise<number | null>((r) => child.on("close", r));
    let streamError: Error | undefined = tar.errored ?? undefined; // it may have failed while we made the directory
    if (streamError) child.kill("SIGKILL");
    tar.once("error", (e) => {
      streamError = e;
      child.kill("SIGKILL");
    });
    // like a real backend: done when tar exits, which may be before the input's trailing padding
    tar.pipe(child.stdin!);
    child.stdin!.on("error", () => undefined);
    const code = await exited;
    tar.unpipe(child.stdin!);
    if (streamError) throw streamError;
    if (code !== 0) throw new Error(`tar into ${dir} exited ${code}: ${err}`);
  }

  async logs(): Promise<Readable> {
    return new PassThrough().end() as unknown as Readable;
  }

  async releaseCompute(id: string): Promise<void> {
    const m = await this.meta(id);
    if (!m) return;
    if (alive(m.pid)) process.kill(m.pid!, "SIGKILL");
    await this.stopProcs(id);
    await rm(this.fsRoot(id), { recursive: true, force: true });
    await this.writeMeta(id, { sandbox: { ...m.sandbox, phase: "Paused", ready: false } });
  }

  async delete(id: string): Promise<void> {
    const m = await this.meta(id);
    if (m && alive(m.pid)) process.kill(m.pid!, "SIGKILL");
    await this.stopProcs(id);
    await rm(join(this.root, id), { recursive: true, force: true });
  }

  async describe(id: string): Promise<Sandbox | undefined> {
    const m = await this.meta(id);
    if (!m) return undefined;
    if (m.sandbox.phase === "Running" && !alive(m.pid))
      return { ...m.sandbox, phase: "Failed", ready: false, reason: "Error" };
    return m.sandbox;
  }

  /** Kills every compute process this backend's state dir knows (test teardown). */
  async killAll(): Promise<void> {
    const { readdir } = await import("node:fs/promises");
    for (const id of await readdir(this.root).catch(() => [] as string[])) {
      const m = await this.meta(id);
      if (m && alive(m.pid)) process.kill(m.pid!, "SIGKILL");
    }
  }

  /** true while the sandbox's compute process runs */
  async hasCompute(id: string): Promise<boolean> {
    const m = await this.meta(id);
    return alive(m?.pid) && existsSync(this.fsRoot(id));
  }

  async list(): Promise<Sandbox[]> {
    return [];
  }
  async touch(): Promise<void> {}
  subscribe(): () => void {
    return () => undefined;
  }
  async close(): Promise<void> {}
}
