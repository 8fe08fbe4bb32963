// /workspace of each sandbox: a sparse ext4 image file, <stateDir>/sandboxes/<key>/workspace.img,
// of exactly the size class's workspace bytes. The helper loop-mounts it on /workspace inside the
// sandbox's own mount namespace (autoclear), so the kernel enforces the size (ENOSPC) and nothing
// is ever mounted on the host: when the sandbox's processes end, for whatever reason, the mount and
// the loop device go with them, and the data stays in the file (restart adoption, and pause/resume
// later). Why not a plain directory with quotas: user/project quotas need CONFIG_QUOTA and a
// quota-mounted filesystem, which this class of machine (and many container hosts) lacks; why not
// tmpfs: it is charged to memory and lost on reboot.
//
// Cost: a sparse copy of a pre-formatted template (~4 ms); four copies per size are made
// ahead in <stateDir>/workspaces/spare so creates do not wait for it.
import { execFile } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import type { Logger } from "../core/log.ts";

const run = promisify(execFile);
const SPARES_PER_SIZE = 4;

export const WORKSPACE_IMAGE = "workspace.img";

export class WorkspaceStore {
  private readonly root: string;
  private readonly spares = new Map<number, string[]>();
  private readonly templates = new Map<number, Promise<string>>();
  private refilling?: Promise<void>;
  /** background deletions of removed slot directories */
  private readonly removing = new Set<Promise<void>>();
  private closed = false;

  constructor(
    stateDir: string,
    private readonly logger: Logger,
  ) {
    this.root = path.join(stateDir, "workspaces");
  }

  async start(): Promise<void> {
    if (!fs.existsSync("/dev/loop-control")) {
      throw new Error(
        "local backend: /dev/loop-control is missing; workspaces are size-limited ext4 images mounted through loop devices; load the loop module (modprobe loop)",
      );
    }
    fs.rmSync(path.join(this.root, "spare"), { recursive: true, force: true });
    fs.rmSync(path.join(this.root, "trash"), { recursive: true, force: true });
    fs.mkdirSync(path.join(this.root, "spare"), { recursive: true });
  }

  /** Puts a fresh workspace image of `bytes` into `slotDir` (created if needed). */
  async acquire(bytes: number, slotDir: string): Promise<void> {
    fs.mkdirSync(slotDir, { recursive: true, mode: 0o711 });
    const img = path.join(slotDir, WORKSPACE_IMAGE);
    const spare = this.spares.get(bytes)?.shift();
    if (spare) fs.renameSync(spare, img);
    else await this.copyTemplate(bytes, img);
    this.wantSpares(bytes);
  }

  /**
   * Removes a slot's directory. It is renamed into trash/ at once and deleted in the
   * background: deleting a workspace image drops its data and page cache, about 200 ms per GiB
   * written, which would otherwise sit on the path of every pause (the compute release). Trash
   * left by a crash is deleted on the next start; close() waits for what is still going.
   */
  async remove(slotDir: string): Promise<void> {
    const trash = path.join(this.root, "trash", `${path.basename(slotDir)}-${crypto.randomBytes(4).toString("hex")}`);
    try {
      fs.mkdirSync(path.dirname(trash), { recursive: true });
      fs.renameSync(slotDir, trash);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT" && !fs.existsSync(slotDir)) return;
      // another filesystem or a stuck rename: delete in place, as before
      await fs.promises.rm(slotDir, { recursive: true, force: true });
      return;
    }
    const gone = fs.promises
      .rm(trash, { recursive: true, force: true })
      .catch((e: Error) =>
        this.logger.error(
          { op: "workspace-remove", path: trash, err: e.message },
          "deleting a removed workspace failed; it is retried on the next start",
        ),
      )
      .finally(() => this.removing.delete(gone));
    this.removing.add(gone);
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.removing);
    await this.refilling;
    this.spares.clear();
    fs.rmSync(path.join(this.root, "spare"), { recursive: true, force: true });
  }

  private wantSpares(bytes: number): void {
    if (!this.spares.has(bytes)) this.spares.set(bytes, []);
    if (this.refilling || this.closed) return;
    this.refilling = (async () => {
      try {
        for (;;) {
          const entry = [...this.spares.entries()].find(([, list]) => list.length < SPARES_PER_SIZE);
          if (!entry || this.closed) return;
          const file = path.join(this.root, "spare", `${crypto.randomBytes(6).toString("hex")}.img`);
          await this.copyTemplate(entry[0], file);
          entry[1].push(file);
        }
      } catch (err) {
        this.logger.error({ op: "workspace-spares", err: (err as Error).message }, "preparing spare workspaces failed");
      } finally {
        this.refilling = undefined;
      }
    })();
  }

  private async copyTemplate(bytes: number, dest: string): Promise<void> {
    const template = await this.template(bytes);
    await run("cp", ["--sparse=always", template, dest]);
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
          // no reserved blocks; inode tables zeroed now (the sparse copy keeps zeros as holes), so
          // the kernel does no lazy init work on each sandbox's first mount
          await run("mkfs.ext4", ["-q", "-F", "-m", "0", "-E", "lazy_itable_init=0,lazy_journal_init=1", tmp]);
        } catch (err) {
          fs.rmSync(tmp, { force: true });
          const e = err as { stderr?: string; message: string };
          throw new Error(
            `local backend: mkfs.ext4 for a ${bytes}-byte workspace failed: ${(e.stderr || e.message).trim()}; install e2fsprogs (apt-get install -y e2fsprogs)`,
          );
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
