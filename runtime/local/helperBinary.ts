// Finds the in-sandbox helper binary, building it from tools/local-helper/ (sbx-helper.c and
// its seccomp filter) with scripts/build-local-helper.sh when it is missing or its sources changed.
import { execFile } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const HELPER_BINARY = path.join(repoRoot, ".cache/local/sbx-helper");
const BUILD_SCRIPT = path.join(repoRoot, "scripts/build-local-helper.sh");
/**
 * What the build stamp covers, in the order the build script hashes them (keep both lists in
 * step): every source and the script itself, so a changed filter or changed compiler flags
 * rebuild a helper that an older checkout already built on this machine.
 */
export const HELPER_STAMP_INPUTS = [
  "tools/local-helper/sbx-helper.c",
  "tools/local-helper/seccomp.c",
  "tools/local-helper/seccomp.h",
  "tools/local-helper/port-relay.c",
  "tools/local-helper/port-relay.h",
  "tools/local-helper/channel.c",
  "tools/local-helper/channel.h",
  "tools/local-helper/daemon.c",
  "tools/local-helper/registry.c",
  "tools/local-helper/registry.h",
  "tools/local-helper/ring.c",
  "tools/local-helper/blob.c",
  "tools/local-helper/blob.h",
  "tools/local-helper/sha256.c",
  "tools/local-helper/sha256.h",
  "scripts/build-local-helper.sh",
];

/** sha256 (hex) of the stamp inputs under `root`, concatenated: what `<binary>.sha256` holds when current. */
export function helperSourceDigest(root: string = repoRoot): string {
  const h = crypto.createHash("sha256");
  for (const rel of HELPER_STAMP_INPUTS) h.update(fs.readFileSync(path.join(root, rel)));
  return h.digest("hex");
}

function isCurrent(): boolean {
  try {
    return (
      fs.statSync(HELPER_BINARY).isFile() &&
      fs.readFileSync(`${HELPER_BINARY}.sha256`, "utf8").trim() === helperSourceDigest()
    );
  } catch {
    return false;
  }
}

/** Returns the helper's path, building it first if needed. */
export async function ensureHelperBinary(): Promise<string> {
  if (isCurrent()) return HELPER_BINARY;
  try {
    await promisify(execFile)("bash", [BUILD_SCRIPT], { timeout: 120_000 });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(
      `local backend: building the sandbox helper (${BUILD_SCRIPT}) failed: ${(e.stderr || e.message).trim()}; ` +
        `install a C compiler and static libc (apt-get install -y gcc libc6-dev) or run scripts/ensure-tools.sh`,
    );
  }
  if (!isCurrent())
    throw new Error(`local backend: ${BUILD_SCRIPT} ran but ${HELPER_BINARY} is still missing or stale`);
  return HELPER_BINARY;
}
