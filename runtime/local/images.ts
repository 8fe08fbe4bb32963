// Profiles -> root filesystems. "host" is the host's read-only system directories; "oci:<layout
// dir>:<tag>" is an OCI image layout, unpacked once with umoci into <stateDir>/images and reused.
// See docs/local-backend.md for making one (umoci from a directory, or skopeo from a registry).
import { execFile } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { ValidationError } from "../core/errors.ts";
import { IN_SANDBOX } from "./launch.ts";

const run = promisify(execFile);

export class ImageStore {
  private readonly unpacking = new Map<string, Promise<string>>();
  constructor(private readonly dir: string) {}

  /** Returns "host" or the path of an unpacked rootfs that has the sandbox's mount points. */
  async resolve(profile: string, image: string): Promise<string> {
    if (image === "host") return "host";
    const m = /^oci:(.+):([^:/]+)$/.exec(image);
    if (!m) {
      throw new ValidationError(
        `catalog.${profile}`,
        image,
        'the local backend takes "host" or "oci:<OCI layout dir>:<tag>" (an image layout made with umoci or skopeo)',
      );
    }
    const [, layout, tag] = m;
    let index: string;
    try {
      index = fs.readFileSync(path.join(layout, "index.json"), "utf8");
    } catch (err) {
      throw new ValidationError(
        `catalog.${profile}`,
        image,
        `cannot read ${path.join(layout, "index.json")} (${(err as Error).message}); create the layout with umoci init/new or skopeo copy`,
      );
    }
    const key = crypto.createHash("sha256").update(`${image}\n${index}`).digest("hex").slice(0, 24);
    const bundle = path.join(this.dir, key);
    const rootfs = path.join(bundle, "rootfs");
    if (fs.existsSync(path.join(bundle, ".complete"))) return rootfs;
    let p = this.unpacking.get(key);
    if (!p) {
      p = this.unpack(layout, tag, bundle).finally(() => this.unpacking.delete(key));
      this.unpacking.set(key, p);
    }
    return p;
  }

  private async unpack(layout: string, tag: string, bundle: string): Promise<string> {
    const tmp = `${bundle}.tmp-${process.pid}`;
    fs.rmSync(tmp, { recursive: true, force: true });
    fs.mkdirSync(path.dirname(tmp), { recursive: true });
    try {
      await run("umoci", ["unpack", "--image", `${layout}:${tag}`, tmp], { timeout: 600_000 });
    } catch (err) {
      fs.rmSync(tmp, { recursive: true, force: true });
      const e = err as { stderr?: string; message: string; code?: string };
      const fix =
        e.code === "ENOENT"
          ? "install umoci (apt-get install -y umoci, or scripts/install-debian.sh)"
          : "check the layout and tag (umoci ls --layout <dir>)";
      throw new Error(
        `local backend: umoci unpack of ${layout}:${tag} failed: ${(e.stderr || e.message).trim()}; ${fix}`,
      );
    }
    const rootfs = path.join(tmp, "rootfs");
    // mount points the sandbox needs; the rootfs is bind-mounted read-only, so create them now
    for (const d of ["proc", "dev", "tmp", IN_SANDBOX.workspace.slice(1), IN_SANDBOX.runDir.slice(1)])
      fs.mkdirSync(path.join(rootfs, d), { recursive: true });
    fs.writeFileSync(path.join(rootfs, IN_SANDBOX.helper.slice(1)), "");
    fs.writeFileSync(path.join(tmp, ".complete"), "");
    fs.rmSync(bundle, { recursive: true, force: true });
    fs.renameSync(tmp, bundle);
    return path.join(bundle, "rootfs");
  }
}
