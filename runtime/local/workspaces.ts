// /workspace of each sandbox: a sparse ext4 image file under the state dir, loop-mounted on the
// host while the sandbox runs and bind-mounted into it. The filesystem's size is the size class's
// workspace limit, so the kernel enforces it (ENOSPC); the data is a plain file that outlives the
// sandbox's processes (restart adoption now, pause/resume later). Why not a plain directory with
// quotas: user/project quotas need CONFIG_QUOTA and a quota-mounted filesystem, which this class
// of machine (and many container hosts) lacks; why not tmpfs: it is charged to memory and lost on
// reboot.
//
// Cost: copying a pre-formatted template (~4 ms, sparse) and a loop mount (~15 ms). To keep that
// off the create path, a few formatted and mounted spares per size wait in <stateDir>/workspaces.
import { execFile } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import type { Logger } from "../core/log.ts";

const run = promisify(execFile);
const SPARES_PER_SIZE = 2;

export const WORKSPACE_IMAGE = "workspace.img";
export const WORKSPACE_DIR = "workspace";

export class WorkspaceStore {
  private readonly root: string;
  private readonly spares = new Map<number, string[]>();
  private readonly templates = new Map<number, Promise<string>>();
  private refilling?: Promise<void>;
  private closed = false;

  constructor(
    stateDir: string,
    private readonly logger: Logger,
  ) {
    this.root = path.join(stateDir, "workspaces");
  }

  /** Removes spares a previous process left (they hold loop devices) and checks the tools. */
  async start(): Promise<void> {
    if (!fs.existsSync("/dev/loop-control")) {
      throw new Error("local backend: /dev/loop-control is missing; workspaces are size-limited ext4 loop images; load the loop module (modprobe loop)");
    }
    const spareRoot = path.join(this.root, "spare");
    for (const name of readdirOr(spareRoot)) await unmountAndRemove(path.join(spareRoot, name));
    fs.mkdirSync(spareRoot, { recursive: true });
  }

  /**
   * Makes `slotDir` (which must not exist yet) a directory holding a mounted workspace of
   * `bytes`, owned by uid. Takes a spare when there is one.
   */
  async acquire(bytes: number, slotDir: string, uid: number): Promise<void> {
    const spare = this.spares.get(bytes)?.shift();
    fs.mkdirSync(path.dirname(slotDir), { recursive: true });
    if (spare) {
      fs.renameSync(spare, slotDir);
    } else {
      await this.prepare(bytes, slotDir);
    }
    const ws = path.join(slotDir, WORKSPACE_DIR);
    fs.chownSync(ws, uid, uid);
    fs.chmodSync(ws, 0o700);
    this.wantSpares(bytes);
  }

  /** Mounts the workspace of an existing slot again (after its sandbox was stopped). */
  async remount(slotDir: string): Promise<void> {
    if (!isMounted(path.join(slotDir, WORKSPACE_DIR))) await mountImage(path.join(slotDir, WORKSPACE_IMAGE), path.join(slotDir, WORKSPACE_DIR));
  }

  /** Unmounts (the image keeps the data). */
  async release(slotDir: string): Promise<void> {
    await unmount(path.join(slotDir, WORKSPACE_DIR));
  }

  async remove(slotDir: string): Promise<void> {
    await unmountAndRemove(slotDir);
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.refilling;
    const all = [...this.spares.values()].flat();
    this.spares.clear();
    await Promise.all(all.map((d) => unmountAndRemove(d)));
  }

  private wantSpares(bytes: number): void {
    if (!this.spares.has(bytes)) this.spares.set(bytes, []);
    if (this.refilling || this.closed) return;
    this.refilling = (async () => {
      try {
        for (;;) {
          const entry = [...this.spares.entries()].find(([, list]) => list.length < SPARES_PER_SIZE);
          if (!entry || this.closed) return;
          const dir = path.join(this.root, "spare", crypto.randomBytes(6).toString("hex"));
          await this.prepare(entry[0], dir);
          if (this.closed) return void (await unmountAndRemove(dir));
          entry[1].push(dir);
        }
      } catch (err) {
        this.logger.error({ op: "workspace-spares", err: (err as Error).message }, "preparing spare workspaces failed");
      } finally {
        this.refilling = undefined;
      }
    })();
  }

  private async prepare(bytes: number, dir: string): Promise<void> {
    const template = await this.template(bytes);
    fs.mkdirSync(path.join(dir, WORKSPACE_DIR), { recursive: true, mode: 0o700 });
    const img = path.join(dir, WORKSPACE_IMAGE);
    await run("cp", ["--sparse=always", template, img]);
    await mountImage(img, path.join(dir, WORKSPACE_DIR));
  }

  private template(bytes: number): Promise<string> {
    let p = this.templates.get(bytes);
    if (!p) {
      p = (async () => {
        const file = path.join(this.root, "templates", `ext4-${bytes}.img`);
        if (fs.existsSync(file)) return file;
        fs.mkdirSync(path.dirname(file), { recursive: true });
        const tmp = `${file}.${process.pid}.tmp`;
        fs.rmSync(tmp, { force: true });
        fs.writeFileSync(tmp, "");
        fs.truncateSync(tmp, bytes);
        try {
          // no reserved blocks, no lost+found surprises for users, lazy init keeps it sparse
          await run("mkfs.ext4", ["-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1", tmp]);
        } catch (err) {
          fs.rmSync(tmp, { force: true });
          const e = err as { stderr?: string; message: string; code?: string };
          throw new Error(`local backend: mkfs.ext4 for a ${bytes}-byte workspace failed: ${(e.stderr || e.message).trim()}; install e2fsprogs (apt-get install -y e2fsprogs)`);
        }
        fs.renameSync(tmp, file);
        return file;
      })();
      p.catch(() => this.templates.delete(bytes));
      this.templates.set(bytes, p);
    }
    return p;
  }
}

async function mountImage(img: string, dir: string): Promise<void> {
  try {
    await run("mount", ["-t", "ext4", "-o", "loop,nosuid,nodev,noatime", img, dir]);
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`local backend: cannot loop-mount the workspace ${img}: ${(e.stderr || e.message).trim()}; the local backend needs root and free loop devices`);
  }
  fs.rmSync(path.join(dir, "lost+found"), { recursive: true, force: true });
}

function isMounted(dir: string): boolean {
  const target = path.resolve(dir);
  return fs
    .readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .some((l) => l.split(" ")[4] === target);
}

async function unmount(dir: string): Promise<void> {
  if (!isMounted(dir)) return;
  try {
    await run("umount", [dir]);
  } catch (err) {
    // busy (a process still holds it): detach now, the kernel finishes when it lets go
    await run("umount", ["-l", dir]).catch(() => {
      throw new Error(`local backend: cannot unmount ${dir}: ${(err as Error).message}`);
    });
  }
}

async function unmountAndRemove(dir: string): Promise<void> {
  await unmount(path.join(dir, WORKSPACE_DIR));
  // never recurse into a mounted workspace: that would delete the image's content, not the mount
  if (isMounted(path.join(dir, WORKSPACE_DIR))) throw new Error(`local backend: ${dir}/${WORKSPACE_DIR} is still mounted; not removing it`);
  await fs.promises.rm(dir, { recursive: true, force: true });
}

function readdirOr(dir: string): string[] {
  try {
    return fs.readdirSync(dir);
  } catch {
    return [];
  }
}
