// What a local sandbox must not be able to do, each proven against real sandboxes.
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { detectCgroups, listSandboxKeys, sandboxDirs } from "../../runtime/local/cgroups.ts";
import { cgroupRootName, uidBlockBase } from "../../runtime/local/records.ts";
import { createReady, type Harness, run, startBackend } from "./harness.ts";

let h: Harness;
let a: string;
let b: string;

beforeAll(async () => {
  h = await startBackend();
  [a, b] = await Promise.all([createReady(h), createReady(h)]);
});
afterAll(async () => {
  await h?.backend.close();
});

describe("local sandbox isolation", () => {
  it("cannot see host processes: only its own are in /proc", async () => {
    const r = await run(
      h.backend,
      a,
      'for p in /proc/[0-9]*; do echo "${p#/proc/} $(tr "\\0" " " < $p/cmdline)"; done',
    );
    expect(r.exitCode).toBe(0);
    const lines = r.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/^1 \/\.sbx\/helper /);
    // helper, its relays, the shell, the loop's subshells: a handful, never the host's hundreds
    expect(lines.length).toBeLessThan(10);
    expect(r.stdout).not.toMatch(/vitest|node|bwrap/);
    expect(fs.existsSync(`/proc/${process.pid}`)).toBe(true);
  });

  it("cannot write outside /workspace and /tmp", async () => {
    const r = await run(
      h.backend,
      a,
      `for d in / /usr /etc /bin /.sbx /.sbx/run /proc /dev /var /root; do if touch "$d/sbx-probe" 2>/dev/null; then echo "WROTE $d"; fi; done
       echo x >> /etc/passwd 2>/dev/null && echo "WROTE /etc/passwd"
       hostname evil 2>/dev/null && echo "WROTE hostname"
       touch /workspace/ok && touch /tmp/ok && echo writable-ok`,
    );
    expect(r.stdout.trim()).toBe("writable-ok");
  });

  it("/tmp is size-limited", async () => {
    const r = await run(h.backend, a, "head -c 80000000 /dev/zero > /tmp/big; echo rc=$?; rm -f /tmp/big");
    // the harness's nano class has tmp: 64Mi
    expect(r.stdout).toContain("rc=1");
    expect(r.stderr).toMatch(/No space left on device/);
  });

  it("cannot reach the network: loopback only, host listeners unreachable", async () => {
    const server = net.createServer((s) => s.end("host-secret")).listen(0, "127.0.0.1");
    await new Promise((r) => server.once("listening", r));
    const port = (server.address() as net.AddressInfo).port;
    try {
      const r = await run(
        h.backend,
        a,
        `ip -o link | awk '{print $2}'
         bash -c 'exec 3<>/dev/tcp/127.0.0.1/${port} && cat <&3' 2>&1 || echo host-loopback-refused
         bash -c 'exec 3<>/dev/tcp/1.1.1.1/53' 2>&1 || echo internet-unreachable`,
        { timeoutMs: 10_000 },
      );
      expect(r.stdout).toMatch(/^lo:\n/);
      expect(r.stdout).not.toContain("host-secret");
      expect(r.stdout).toContain("host-loopback-refused");
      expect(r.stdout).toMatch(/Network is unreachable/);
      expect(r.stdout).toContain("internet-unreachable");
    } finally {
      server.close();
    }
  });

  it("has no capabilities and runs as an unprivileged uid that setuid binaries cannot raise", async () => {
    const r = await run(
      h.backend,
      a,
      "grep -E '^(Uid|Gid|Cap[A-Za-z]+|NoNewPrivs):' /proc/self/status; mount -t tmpfs none /tmp 2>&1 || echo mount-refused",
    );
    const base = uidBlockBase(h.stateDir);
    const status = Object.fromEntries(
      r.stdout
        .split("\n")
        .filter((l) => l.includes(":") && !l.includes("mount"))
        .map((l) => l.split(/:\s+/)),
    );
    for (const cap of ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"])
      expect(status[cap], cap).toBe("0000000000000000");
    expect(status.NoNewPrivs).toBe("1");
    const uid = Number(status.Uid.split(/\s+/)[0]);
    expect(uid).toBeGreaterThanOrEqual(base);
    expect(uid).toBeLessThan(base + 65536);
    expect(status.Uid.split(/\s+/)).toEqual([String(uid), String(uid), String(uid), String(uid)]);
    expect(r.stdout).toContain("mount-refused");
  });

  it("cannot read another sandbox's workspace", async () => {
    expect((await run(h.backend, a, "echo secret-of-a > /workspace/secret && id -u")).exitCode).toBe(0);
    // on the host a workspace is an image file, mounted only inside its own sandbox's namespace
    const keys = fs.readdirSync(path.join(h.stateDir, "sandboxes"));
    const images = keys.map((k) => path.join(h.stateDir, "sandboxes", k, "workspace.img"));
    expect(images.every((p) => fs.existsSync(p))).toBe(true);
    expect(fs.readFileSync("/proc/self/mountinfo", "utf8")).not.toContain(h.stateDir);
    const r = await run(
      h.backend,
      b,
      `ls -A /workspace; for p in ${images.join(" ")}; do cat "$p" 2>/dev/null; done; grep -c workspace /proc/self/mountinfo; id -u`,
    );
    expect(r.stdout).not.toContain("secret-of-a");
    const lines = r.stdout.trim().split("\n");
    expect(lines.at(-2)).toBe("1"); // its own /workspace, nothing else
    const ua = (await run(h.backend, a, "id -u")).stdout;
    expect(lines.at(-1)).not.toBe(ua.trim());
  });

  it("contains a fork bomb within the pids limit and stays usable", async () => {
    const id = await createReady(h, { sizeName: "tiny" });
    // where the pids controller is depends on the machine (v1 pids hierarchy or v2): ask the mounts
    const layout = detectCgroups(cgroupRootName(h.stateDir));
    const keyDirs = listSandboxKeys(layout).map(
      (k) => sandboxDirs(layout, k)[layout.version === 1 ? "pids" : "unified"],
    );
    const sandboxDir = keyDirs.find((d) => fs.readFileSync(`${d}/pids.max`, "utf8").trim() === "48");
    expect(sandboxDir, "the tiny sandbox's pids cgroup").toBeDefined();
    const bomb = run(h.backend, id, ["bash", "-c", "f() { f | f & }; f; sleep 30"], { timeoutMs: 3000 });
    let peak = 0;
    let refused = 0;
    for (let i = 0; i < 50; i++) {
      await new Promise((r) => setTimeout(r, 50));
      peak = Math.max(peak, Number(fs.readFileSync(`${sandboxDir}/pids.current`, "utf8")));
      // refused forks are counted where they happened (the command's cgroup) on some kernels,
      // in the limited cgroup on others: sum the subtree while it exists
      const dirs = [
        sandboxDir!,
        ...fs
          .readdirSync(sandboxDir!, { withFileTypes: true })
          .filter((e) => e.isDirectory())
          .map((e) => `${sandboxDir}/${e.name}`),
      ];
      let n = 0;
      for (const d of dirs)
        n += Number(
          /max (\d+)/.exec(
            fs.existsSync(`${d}/pids.events`) ? fs.readFileSync(`${d}/pids.events`, "utf8") : "max 0",
          )?.[1] ?? 0,
        );
      refused = Math.max(refused, n);
    }
    const r = await bomb;
    expect(r).toMatchObject({ timedOut: true, exitCode: 124 });
    expect(peak).toBe(48);
    expect(refused).toBeGreaterThan(0);
    const after = await run(h.backend, id, "echo still-alive; ls /proc | grep -c '^[0-9]'");
    expect(after.stdout).toMatch(/^still-alive\n/);
    expect(Number(after.stdout.split("\n")[1])).toBeLessThan(10);
  });

  it("kills a memory hog at its memory limit: exit 137, reported as oomKilled, sandbox usable after", async () => {
    const id = await createReady(h, { sizeName: "tiny" });
    const r = await run(h.backend, id, ["tail", "/dev/zero"], { timeoutMs: 30_000 });
    expect(r).toMatchObject({ exitCode: 137, oomKilled: true, timedOut: false });
    const ok = await run(h.backend, id, "echo fine");
    expect(ok).toMatchObject({ stdout: "fine\n", exitCode: 0, oomKilled: false });
    const sb = await h.backend.describe(id);
    expect(sb).toMatchObject({ phase: "Running", ready: true });
  });
});

describe("local workspace limits", () => {
  it("enforces the size class's workspace size and keeps the sandbox usable", async () => {
    const id = await createReady(h, { sizeName: "tiny" });
    // the harness's tiny class has workspace: 256Mi
    const r = await run(
      h.backend,
      id,
      "df -B1 --output=size /workspace | tail -1; head -c 300000000 /dev/zero > /workspace/big; echo rc=$?; rm -f /workspace/big; echo after > /workspace/small && cat /workspace/small",
    );
    const size = Number(r.stdout.split("\n")[0]);
    expect(size).toBeGreaterThan(200 * 2 ** 20);
    expect(size).toBeLessThanOrEqual(256 * 2 ** 20);
    expect(r.stdout).toContain("rc=1");
    expect(r.stderr).toMatch(/No space left on device/);
    expect(r.stdout).toMatch(/after\n$/);
  });
});
