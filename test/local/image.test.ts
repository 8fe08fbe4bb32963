// Profiles backed by an OCI image layout: unpacked with umoci, used as the sandbox's read-only root.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createReady, type Harness, run, spec, startBackend, tempStateDir } from "./harness.ts";

function need(cmd: string, pkg: string): void {
  try {
    execFileSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" });
  } catch {
    throw new Error(
      `${cmd} is not installed; install it with: apt-get install -y ${pkg} (or run scripts/install-debian.sh as root)`,
    );
  }
}

let h: Harness;
let image: string;

beforeAll(async () => {
  need("umoci", "umoci");
  need("gcc", "gcc libc6-dev");
  // an image with one static program and nothing else, made the way docs/local-backend.md says
  const work = tempStateDir();
  const layout = path.join(work, "layout");
  const bundle = path.join(work, "bundle");
  execFileSync("umoci", ["init", "--layout", layout]);
  execFileSync("umoci", ["new", "--image", `${layout}:tiny`]);
  execFileSync("umoci", ["unpack", "--image", `${layout}:tiny`, bundle]);
  fs.writeFileSync(
    path.join(work, "hello.c"),
    '#include <stdio.h>\nint main(int c, char **v) { printf("hello from %s\\n", c > 1 ? v[1] : "oci"); return 7; }\n',
  );
  execFileSync("gcc", ["-static", "-O2", "-o", path.join(bundle, "rootfs", "hello"), path.join(work, "hello.c")]);
  execFileSync("umoci", ["repack", "--image", `${layout}:tiny`, bundle]);
  image = `oci:${layout}:tiny`;
  h = await startBackend({ config: { catalog: { base: "host", tiny: image } } });
});
afterAll(async () => {
  await h?.backend.close();
});

describe("local OCI image profiles", () => {
  it("runs with the unpacked image as its root, not the host's", async () => {
    const id = await createReady(h, { image: { profile: "tiny", image } });
    const r = await run(h.backend, id, ["/hello", "sandbox"]);
    expect(r).toMatchObject({ stdout: "hello from sandbox\n", exitCode: 7 });
    // the host's shell is not in this image
    expect((await run(h.backend, id, ["sh", "-c", "true"])).exitCode).toBe(127);
    // unpacked once, reused by the next sandbox of the profile
    const unpacked = fs.readdirSync(path.join(h.stateDir, "images")).filter((n) => !n.includes(".tmp"));
    await createReady(h, { image: { profile: "tiny", image } });
    expect(fs.readdirSync(path.join(h.stateDir, "images")).filter((n) => !n.includes(".tmp"))).toEqual(unpacked);
  });

  it("rejects an image reference it cannot use, naming the fix", async () => {
    await expect(
      h.backend.provision({ ...spec(h.config), image: { profile: "bad", image: "docker.io/library/debian:12" } }),
    ).rejects.toThrow(
      /catalog\.bad: invalid value "docker\.io\/library\/debian:12": the local backend takes "host" or "oci:<OCI layout dir>:<tag>"/,
    );
  });
});
