// What a tenant of a "host" profile sandbox learns about the host: not its users (the sandbox has
// an /etc of its own), not its layout (no mount names the state dir or the checkout), and yet
// everything that ran with the host's /etc still runs (gcc and tar under this /etc are in
// seccomp.test.ts). Run it with HOST_SYSTEM_DIRS in launch.ts holding "etc" again, or without
// the helper's --unmount arguments, and it fails.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createReady, type Harness, run, startBackend } from "./harness.ts";

const CHECKOUT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
// compiling and starting interpreters on a busy 2-core machine; the bound only stops a hung command
const SLOW = { timeoutMs: 120_000 };

let h: Harness;
let id: string;

beforeAll(async () => {
  h = await startBackend();
  id = await createReady(h);
}, 120_000);
afterAll(async () => {
  await h?.backend.close();
});

const names = (text: string) =>
  text
    .split("\n")
    .filter((l) => l && !l.startsWith("#"))
    .map((l) => l.split(":")[0]);

describe("what a local sandbox shows of the host", () => {
  it("has an /etc/passwd and /etc/group of its own: root, its user and nobody; no host user", async () => {
    const r = await run(
      h.backend,
      id,
      "cat /etc/passwd; echo ---; cat /etc/group; echo ---; id -un; echo ---; getent passwd",
    );
    expect(r.stderr).toBe("");
    const [passwd, group, whoami, getent] = r.stdout.split("---\n");
    expect(names(passwd)).toEqual(["root", "user", "nobody"]);
    expect(names(group)).toEqual(["root", "user", "nogroup"]);
    expect(whoami).toBe("user\n");
    const hostOnly = [
      ...names(fs.readFileSync("/etc/passwd", "utf8")),
      ...names(fs.readFileSync("/etc/group", "utf8")),
    ].filter((n) => !["root", "user", "nobody", "nogroup"].includes(n));
    expect(hostOnly.length, "the host has users of its own to hide").toBeGreaterThan(0);
    for (const n of hostOnly) expect(names(passwd + group + getent), n).not.toContain(n);
  });

  it("names itself, not the host: hostname, hosts, resolv.conf; and has no machine-id", async () => {
    const r = await run(
      h.backend,
      id,
      "cat /etc/hostname; getent hosts $(hostname) | tr -s ' \\t' ' '; cat /etc/resolv.conf; test -e /etc/machine-id && echo has-machine-id; readlink /etc/localtime",
    );
    expect(r.stdout).toBe(`${id}\n127.0.1.1 ${id}\nnameserver 127.0.0.1\n/usr/share/zoneinfo/Etc/UTC\n`);
  });

  it("has an /etc/shadow, as any system does, that its user cannot read", async () => {
    const r = await run(h.backend, id, "stat -c '%U %a' /etc/shadow; cat /etc/shadow");
    expect(r.stdout).toBe("root 640\n");
    expect(r.stderr).toMatch(/cat: \/etc\/shadow: Permission denied/);
  });

  it("lists no host path under the state dir or the checkout in /proc/self/mountinfo", async () => {
    const r = await run(h.backend, id, "cat /proc/self/mountinfo /proc/1/mountinfo 2>&1");
    const hidden = [h.stateDir, fs.realpathSync(h.stateDir), CHECKOUT, fs.realpathSync(CHECKOUT)];
    // the test would prove nothing if the sandbox's mounts were not there to read
    expect(r.stdout).toMatch(/ \/workspace /);
    for (const p of hidden) expect(r.stdout).not.toContain(p);
    // nor the helper's own mounts, whose sources live there
    expect(r.stdout).not.toMatch(/ \/\.sbx/);
  });
});

describe("what still runs with the sandbox's own /etc", () => {
  it("python3 with TLS defaults and pwd, node with TLS, pip, awk through /etc/alternatives", async () => {
    const py = `
import os, pwd, ssl
ctx = ssl.create_default_context()
print(pwd.getpwuid(os.getuid()).pw_name, pwd.getpwuid(os.getuid()).pw_dir, len(ctx.get_ca_certs()) > 0 or ctx.cert_store_stats()["x509_ca"] > 0)
`;
    const js = `const tls = require("node:tls"); tls.createSecureContext(); console.log(require("node:os").userInfo().username, tls.rootCertificates.length > 0)`;
    const r = await run(
      h.backend,
      id,
      [
        "sh",
        "-c",
        `python3 -c '${py}' && node -e '${js}' && pip --version | cut -d' ' -f1 && python3 -m pip --version | cut -d' ' -f1 && awk 'BEGIN { print "awk" }'`,
      ],
      SLOW,
    );
    expect(r.stderr).toBe("");
    expect(r.stdout).toBe("user /workspace True\nuser true\npip\npip\nawk\n");
  });
});
