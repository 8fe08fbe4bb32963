// One running local sandbox ("slot"): launch with bubblewrap, readiness, the watch connection
// that tells us when it dies, and teardown. Policy (TTL, death, events) lives in slotTable.ts,
// the pool and the verbs in backend.ts.
import { type ChildProcess, spawn } from "node:child_process";
import fs from "node:fs";
import type net from "node:net";
import path from "node:path";
import type { CgroupDirs, CgroupLayout } from "./cgroups.ts";
import {
  cgroupPids,
  childDirs,
  createSandboxCgroups,
  killCgroup,
  openDirFds,
  removeCgroup,
  sandboxDirs,
} from "./cgroups.ts";
import { type LaunchEtc, planBwrapArgs } from "./launch.ts";
import { type HostEtc, planSandboxEtc } from "./planEtc.ts";
import { helperWatch } from "./protocol.ts";
import { type SandboxRecord, type SlotPaths, slotPaths } from "./records.ts";
import { StartGate } from "./startGate.ts";
import type { WorkspaceStore } from "./workspaces.ts";

export interface SlotEnv {
  stateDir: string;
  layout: CgroupLayout;
  helperPath: string;
  bwrapPath: string;
  hostTopLevel: Record<string, string | null>;
  /** what the host has of the /etc paths a sandbox takes (host.ts hostEtc) */
  hostEtc: HostEtc;
  workspaces: WorkspaceStore;
}

export type SlotState = "starting" | "ready" | "dead";

/**
 * Commands starting at once per sandbox, and how many more may wait their turn. 16 connects stay
 * far below the helper's listen backlog (256). A start in a nano sandbox took about 50 ms during
 * a 500-exec burst on the shared 2-core machine (test/local/exec-burst.test.ts), so the last of
 * 128 waiters starts within seconds; a burst past that gets 429 with Retry-After at once rather
 * than a wait no client would expect.
 */
export const START_CONCURRENCY = 16;
export const START_QUEUE = 128;

export class Slot {
  readonly paths: SlotPaths;
  readonly dirs: CgroupDirs;
  state: SlotState = "starting";
  /** bounds the commands connecting to the helper at once (exec.ts) */
  readonly starts = new StartGate(START_CONCURRENCY, START_QUEUE);
  /** set before we kill it ourselves, so the death is not reported as a crash */
  stopping = false;
  /** why it died, when known before the watch closes (e.g. DeadlineExceeded) */
  deathReason?: string;
  deathMessage?: string;
  readonly ready: Promise<void>;
  private resolveReady!: () => void;
  private rejectReady!: (err: Error) => void;
  private watch?: net.Socket;
  private readonly deathListeners: (() => void)[] = [];
  private released?: Promise<void>;

  constructor(
    private readonly env: SlotEnv,
    readonly rec: SandboxRecord,
  ) {
    this.paths = slotPaths(env.stateDir, rec.key);
    this.dirs = sandboxDirs(env.layout, rec.key);
    this.ready = new Promise((res, rej) => {
      this.resolveReady = res;
      this.rejectReady = rej;
    });
    this.ready.catch(() => {});
  }

  /** Called once the slot has died and its processes are gone (never while any still runs). */
  onDeath(fn: () => void): void {
    this.deathListeners.push(fn);
  }

  /** Makes the slot's directory with its mounted workspace; must run before launch(). */
  async prepare(): Promise<void> {
    await this.env.workspaces.acquire(this.rec.size.workspaceBytes, this.paths.dir);
  }

  /** Creates the socket directory and cgroups, then starts bubblewrap. Readiness arrives on `ready`. */
  launch(): void {
    const { rec, paths } = this;
    fs.mkdirSync(paths.run, { recursive: true, mode: 0o700 });
    createSandboxCgroups(this.env.layout, rec.key, rec.size, rec.uid);
    const hostname = rec.sandbox?.id ?? rec.key;
    // before the other fds: if writing fails, it closes what it opened and nothing else is open
    const etc = rec.rootfs === "host" ? this.openEtc(hostname) : undefined;
    const cgFds = openDirFds(this.dirs);
    const wsFd = fs.openSync(paths.workspaceImage, "r+");
    // the helper reaches the loop devices through this fd; /dev is never mounted in the sandbox
    const devFd = fs.openSync("/dev", fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
    const logFd = fs.openSync(paths.log, "a");
    const etcFds = etc?.files.map((f) => f.fd) ?? [];
    const readyFd = 3;
    const firstEtcFd = readyFd + 3 + cgFds.length;
    const args = planBwrapArgs({
      rootfs: rec.rootfs,
      runDir: paths.run,
      helperPath: this.env.helperPath,
      uid: rec.uid,
      hostname,
      tmpBytes: rec.size.tmpBytes,
      readyFd,
      cgroupFds: cgFds.map((_, i) => readyFd + 1 + i),
      workspaceFd: readyFd + 1 + cgFds.length,
      devFd: readyFd + 2 + cgFds.length,
      hostTopLevel: this.env.hostTopLevel,
      etc: etc && { ...etc, files: etc.files.map((f, i) => ({ ...f, fd: firstEtcFd + i })) },
    });
    let child: ChildProcess;
    try {
      child = spawn(this.env.bwrapPath, args, {
        stdio: ["ignore", logFd, logFd, "pipe", ...cgFds, wsFd, devFd, ...etcFds],
        detached: true,
      });
    } finally {
      for (const fd of [logFd, wsFd, devFd, ...cgFds, ...etcFds]) fs.closeSync(fd);
    }
    child.unref();
    const readyPipe = child.stdio[3] as net.Socket;
    let gotReady = false;
    readyPipe.on("data", () => {
      if (gotReady) return;
      gotReady = true;
      readyPipe.destroy();
      void this.afterReady();
    });
    child.on("error", (err) =>
      this.failStart(
        `cannot run ${this.env.bwrapPath}: ${err.message}; install bubblewrap (apt-get install -y bubblewrap)`,
      ),
    );
    child.on("exit", (code, signal) => {
      if (!gotReady)
        this.failStart(
          `bubblewrap exited (${signal ?? `code ${code}`}) before the sandbox was ready: ${this.logTail()}`,
        );
    });
  }

  /**
   * Writes the sandbox's own /etc files (planEtc.ts) into its directory and opens them: bwrap
   * copies each into the sandbox's root (--file), so no host path of theirs is ever mounted.
   */
  private openEtc(hostname: string): LaunchEtc {
    const plan = planSandboxEtc(this.env.hostEtc, { uid: this.rec.uid, hostname });
    const dir = path.join(this.paths.dir, "etc");
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    const files: LaunchEtc["files"] = [];
    try {
      for (const f of plan.files) {
        const file = path.join(dir, f.path);
        fs.writeFileSync(file, f.content);
        files.push({ path: f.path, fd: fs.openSync(file, "r"), mode: f.mode });
      }
    } catch (err) {
      for (const f of files) fs.closeSync(f.fd);
      throw err;
    }
    return { binds: plan.binds, symlinks: plan.symlinks, files };
  }

  private async afterReady(): Promise<void> {
    const pids = cgroupPids(this.env.layout, childDirs(this.dirs, "init"));
    this.rec.helperPid = pids[0];
    // ready now; the watch connects in parallel (a sandbox that dies before it does still fails)
    this.state = "ready";
    this.resolveReady();
    try {
      await this.attach();
    } catch (err) {
      this.deathReason ??= "Error";
      this.deathMessage ??= `the helper reported ready but its socket did not answer: ${(err as Error).message}`;
      this.died();
    }
  }

  /** Opens the watch connection (also how a restarted backend adopts a live sandbox). */
  async attach(): Promise<void> {
    this.watch = await helperWatch(this.paths.socket, () => this.died());
    this.watch.unref();
    this.state = "ready";
  }

  private failStart(message: string): void {
    if (this.state === "dead") return;
    this.deathReason ??= "Error";
    this.deathMessage ??= message;
    this.rejectReady(new Error(message));
    this.died();
  }

  /**
   * Dead at once (no new exec, readiness fails), but the death listeners only hear of it once every
   * process is gone: they report a terminal phase, and the Manager frees the budget on it. The watch
   * closes when the helper's fds do, while it and the rest of its pid namespace are still exiting.
   */
  private died(): void {
    if (this.state === "dead") return;
    this.state = "dead";
    this.rejectReady(new Error(this.deathMessage ?? "the sandbox stopped before it was ready"));
    const notify = () => {
      for (const fn of this.deathListeners) fn();
    };
    // a kill that failed is stop()'s error to report; the death is still told, never lost
    void this.release().then(notify, notify);
  }

  /** Kills every process of the sandbox and waits until they are gone; one run for every caller at a time. */
  private release(): Promise<void> {
    this.released ??= (async () => {
      let emptied = false;
      try {
        emptied = await killCgroup(this.env.layout, this.dirs);
        // a killed helper stays a zombie until bubblewrap reaps it; "stopped" means gone
        for (let i = 0; i < 400 && this.rec.helperPid && fs.existsSync(`/proc/${this.rec.helperPid}`); i++)
          await new Promise((r) => setTimeout(r, 5));
        this.watch?.destroy();
      } finally {
        // a kill that failed, or a cgroup that would not empty in time, is tried again by the next stop()
        if (!emptied) this.released = undefined;
      }
    })();
    return this.released;
  }

  /** Kills every process of the sandbox and removes its cgroups. Keeps the workspace. */
  async stop(): Promise<void> {
    this.stopping = true;
    // died() before waiting: its listeners run first, while the cgroups (OOM counters) still exist
    this.died();
    await this.release();
    // the pid namespace's teardown finishes asynchronously; cgroups become removable soon after
    for (let i = 0; i < 200 && !removeCgroup(this.dirs); i++) await new Promise((r) => setTimeout(r, 5));
  }

  /** stop() and forget everything on disk. */
  async destroy(): Promise<void> {
    await this.stop();
    await this.env.workspaces.remove(this.paths.dir);
  }

  logTail(lines = 5): string {
    try {
      return fs.readFileSync(this.paths.log, "utf8").trim().split("\n").slice(-lines).join(" | ") || "(no output)";
    } catch {
      return "(no log)";
    }
  }
}
