// What the local backend needs from the host before it starts: bubblewrap, the shape of the
// host's root and the /etc paths a sandbox takes (for the "host" profile), and sole ownership of
// the state dir.
import fs from "node:fs";
import path from "node:path";
import { ConflictError } from "../core/errors.ts";
import { HOST_SYSTEM_DIRS } from "./launch.ts";
import { type HostEtc, wantedHostEtc } from "./planEtc.ts";

/**
 * One process per state dir: a second one would adopt and then fight over the first one's
 * sandboxes. The pid file names the owner; a dead owner (a crash) is taken over.
 */
export function claimStateDir(stateDir: string): void {
  const file = path.join(stateDir, "backend.pid");
  let owner = NaN;
  try {
    owner = Number(fs.readFileSync(file, "utf8").trim());
  } catch {
    // no owner yet
  }
  if (Number.isInteger(owner) && owner !== process.pid && fs.existsSync(`/proc/${owner}`)) {
    throw new ConflictError(
      `local.stateDir ${stateDir} is in use by another sbx process (pid ${owner}); stop that process or give this one another local.stateDir`,
      { stateDir, pid: owner },
    );
  }
  fs.writeFileSync(file, String(process.pid));
}

export function findBwrap(): string {
  for (const dir of (process.env.PATH ?? "/usr/bin").split(":").concat(["/usr/bin"])) {
    const p = path.join(dir, "bwrap");
    if (fs.existsSync(p)) return p;
  }
  throw new Error(
    "local backend: bubblewrap (bwrap) is not installed; install it with apt-get install -y bubblewrap or run scripts/install-debian.sh as root",
  );
}

export function hostTopLevel(): Record<string, string | null> {
  const out: Record<string, string | null> = {};
  for (const name of HOST_SYSTEM_DIRS) {
    try {
      const st = fs.lstatSync(`/${name}`);
      if (st.isSymbolicLink()) out[name] = fs.readlinkSync(`/${name}`);
      else if (st.isDirectory()) out[name] = null;
    } catch {
      // absent on this host
    }
  }
  return out;
}

/** What the host has of the /etc paths a sandbox may take (planEtc.ts), read once at start. */
export function hostEtc(): HostEtc {
  const out: HostEtc = {};
  for (const rel of wantedHostEtc(fs.readdirSync("/etc"))) {
    const p = path.join("/etc", rel);
    try {
      const st = fs.lstatSync(p);
      if (st.isSymbolicLink()) out[rel] = { kind: "symlink", target: fs.readlinkSync(p) };
      else if (st.isDirectory()) out[rel] = { kind: "dir" };
      else if (st.isFile()) out[rel] = { kind: "file" };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
  }
  return out;
}
