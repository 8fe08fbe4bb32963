// The local backend's pure parts: cgroup detection, the bubblewrap plan, frames, the warm pool.
import { describe, expect, it } from "vitest";
import { detectCgroups } from "../../runtime/local/cgroups.ts";
import { IN_SANDBOX, type LaunchPlan, planBwrapArgs } from "../../runtime/local/launch.ts";
import { HOST_ETC_KEPT, type HostEtc, planSandboxEtc, wantedHostEtc } from "../../runtime/local/planEtc.ts";
import { encodeRequest, FrameReader, frame } from "../../runtime/local/protocol.ts";
import { WarmPool } from "../../runtime/local/warmPool.ts";

const v1 = `
25 24 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
26 25 0:23 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu
27 25 0:24 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
28 25 0:25 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
29 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw`;
const v1Combined = `
26 25 0:23 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
27 25 0:24 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
28 25 0:25 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids`;
const v2 = `30 24 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate`;

describe("detectCgroups", () => {
  it.each([
    [
      "v1, one hierarchy per controller",
      v1,
      {
        version: 1,
        mounts: { cpu: "/sys/fs/cgroup/cpu", memory: "/sys/fs/cgroup/memory", pids: "/sys/fs/cgroup/pids" },
      },
    ],
    [
      "v1, cpu and cpuacct co-mounted",
      v1Combined,
      {
        version: 1,
        mounts: { cpu: "/sys/fs/cgroup/cpu,cpuacct", memory: "/sys/fs/cgroup/memory", pids: "/sys/fs/cgroup/pids" },
      },
    ],
  ])("%s", (_, mountinfo, want) => {
    expect(detectCgroups("sbx-x", mountinfo)).toEqual({ ...want, rootName: "sbx-x" });
  });

  it("uses v2 when the unified hierarchy has the controllers, and names the missing ones otherwise", () => {
    expect(detectCgroups("sbx-x", v2, () => "cpuset cpu io memory hugetlb pids rdma misc\n")).toEqual({
      version: 2,
      mounts: { unified: "/sys/fs/cgroup" },
      rootName: "sbx-x",
    });
    expect(() => detectCgroups("sbx-x", v2, () => "cpu io")).toThrow(
      /cgroup2 hierarchy at \/sys\/fs\/cgroup lacks controllers memory, pids and no cgroup v1/,
    );
    // hybrid hosts (like this one's empty cgroup2 at /sys/fs/cgroup/unified) use v1
    expect(detectCgroups("sbx-x", v1, () => "hugetlb").version).toBe(1);
  });

  it("fails naming the fix when nothing is mounted", () => {
    expect(() => detectCgroups("sbx-x", "")).toThrow(
      /neither cgroup v2 nor the v1 memory, pids and cpu hierarchies are mounted.*mount them/,
    );
  });
});

describe("planBwrapArgs", () => {
  const base: LaunchPlan = {
    rootfs: "host",
    runDir: "/state/s1/run",
    helperPath: "/repo/.cache/local/sbx-helper",
    uid: 100_000_001,
    hostname: "sb-1",
    tmpBytes: 1024,
    readyFd: 3,
    cgroupFds: [4, 5],
    workspaceFd: 6,
    devFd: 7,
    hostTopLevel: { usr: null, bin: "usr/bin", lib64: "usr/lib64" },
    etc: {
      binds: ["ssl/certs"],
      symlinks: [{ path: "os-release", target: "../usr/lib/os-release" }],
      files: [{ path: "passwd", fd: 8 }],
    },
  };
  const pairs = (args: string[], flag: string) =>
    args.flatMap((a, i) => (a === flag ? [`${args[i + 1]} ${args[i + 2]}`] : []));

  it("isolates every namespace but user and cgroup, and makes the helper PID 1", () => {
    const args = planBwrapArgs(base);
    for (const f of ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--as-pid-1", "--clearenv"])
      expect(args).toContain(f);
    expect(args).not.toContain("--unshare-user");
    expect(args).not.toContain("--share-net");
    expect(args).not.toContain("--die-with-parent"); // sandboxes outlive a crashed service, for adoption
  });

  it("mounts the host system read-only; the helper's dir (root-only) is the only host dir bound writable; no host /dev", () => {
    const args = planBwrapArgs(base);
    expect(pairs(args, "--ro-bind")).toEqual([
      "/usr /usr",
      "/etc/ssl/certs /etc/ssl/certs",
      `/repo/.cache/local/sbx-helper ${IN_SANDBOX.helper}`,
    ]);
    expect(pairs(args, "--symlink")).toEqual([
      "usr/bin /bin",
      "usr/lib64 /lib64",
      "../usr/lib/os-release /etc/os-release",
    ]);
    // the sandbox's own files are copied into its root from fds, never bound from a host path
    expect(args.join(" ")).toContain("--perms 0644 --file 8 /etc/passwd");
    // a parent bwrap would make root-only is made readable first
    expect(args.join(" ")).toContain("--perms 0755 --dir /etc/ssl --ro-bind /etc/ssl/certs");
    expect(pairs(args, "--bind")).toEqual([`/state/s1/run ${IN_SANDBOX.runDir}`]);
    expect(args).not.toContain("--dev-bind");
    expect(args.join(" ")).toContain("--perms 1777 --size 1024 --tmpfs /tmp");
    expect(args.join(" ")).toContain("--remount-ro /");
  });

  it("uses an unpacked image as the root instead of the host's directories", () => {
    const args = planBwrapArgs({ ...base, rootfs: "/state/images/abc/rootfs" });
    expect(pairs(args, "--ro-bind")[0]).toBe("/state/images/abc/rootfs /");
    expect(args).not.toContain("/usr");
  });

  it("passes the helper its uid, socket, readiness fd, cgroup fds and workspace image fd", () => {
    const args = planBwrapArgs(base);
    expect(args.slice(args.indexOf("--") + 1)).toEqual([
      IN_SANDBOX.helper,
      "--uid",
      "100000001",
      "--gid",
      "100000001",
      "--socket",
      IN_SANDBOX.socket,
      "--ready-fd",
      "3",
      "--cg-fd",
      "4",
      "--cg-fd",
      "5",
      "--workspace-fd",
      "6",
      "--workspace",
      IN_SANDBOX.workspace,
      "--dev-fd",
      "7",
      "--unmount",
      IN_SANDBOX.runDir,
      "--unmount",
      IN_SANDBOX.helper,
    ]);
  });
});

describe("planSandboxEtc", () => {
  const host: HostEtc = {
    alternatives: { kind: "dir" },
    "ssl/certs": { kind: "dir" },
    "ld.so.cache": { kind: "file" },
    "os-release": { kind: "symlink", target: "../usr/lib/os-release" },
  };
  const etc = planSandboxEtc(host, { uid: 100_000_007, hostname: "sbx-abc" });
  const file = (p: string) => etc.files.find((f) => f.path === p)?.content;

  it("takes from the host only what it has of the kept paths, symlinks as symlinks", () => {
    expect(etc.binds).toEqual(["alternatives", "ssl/certs", "ld.so.cache"]);
    expect(etc.symlinks).toEqual([
      { path: "localtime", target: "/usr/share/zoneinfo/Etc/UTC" },
      { path: "mtab", target: "../proc/self/mounts" },
      { path: "os-release", target: "../usr/lib/os-release" },
    ]);
  });

  it("gives the sandbox its own users, names and resolver", () => {
    expect(etc.files.map((f) => f.path).sort()).toEqual([
      "group",
      "hostname",
      "hosts",
      "nsswitch.conf",
      "passwd",
      "resolv.conf",
      "shadow",
      "timezone",
    ]);
    expect(etc.files.find((f) => f.path === "shadow")?.mode).toBe(0o640);
    expect(file("passwd")).toBe(
      "root:x:0:0:root:/root:/bin/bash\nuser:x:100000007:100000007:sandbox user:/workspace:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    );
    expect(file("group")).toBe("root:x:0:\nuser:x:100000007:\nnogroup:x:65534:\n");
    expect(file("hosts")).toContain("127.0.1.1\tsbx-abc\n");
    expect(file("hostname")).toBe("sbx-abc\n");
  });

  it.each([
    [["python3", "python3.11", "python3.12", "java-17-openjdk", "passwd", "machine-id", "pip.conf", "python3-x"]],
  ])("keeps language runtimes' directories by pattern and nothing else of the host's: %j", (top) => {
    const wanted = wantedHostEtc(top);
    expect(wanted).toEqual([...HOST_ETC_KEPT, "java-17-openjdk", "python3", "python3.11", "python3.12"]);
    for (const secret of [
      "passwd",
      "group",
      "shadow",
      "gshadow",
      "machine-id",
      "hostname",
      "hosts",
      "resolv.conf",
      "pip.conf",
    ])
      expect(wanted).not.toContain(secret);
  });
});

describe("helper frames", () => {
  it("parses frames split at any byte boundary", () => {
    const wire = Buffer.concat([
      frame("P", "42"),
      frame("1", "out"),
      frame("2", Buffer.alloc(70_000, 1)),
      frame("X", "exit:3"),
    ]);
    for (const step of [1, 3, 5, 4096, wire.length]) {
      const got: string[] = [];
      const r = new FrameReader();
      for (let i = 0; i < wire.length; i += step)
        r.push(wire.subarray(i, i + step), { frame: (t, p) => got.push(`${t}:${p.length}`) });
      expect(got).toEqual(["P:2", "1:3", "2:70000", "X:6"]);
    }
  });

  it("hands on output frames in pieces, as views of the received bytes, at any split", () => {
    const big = Buffer.alloc(70_000);
    for (let i = 0; i < big.length; i++) big[i] = i % 251;
    const wire = Buffer.concat([
      frame("P", "42"),
      frame("1", "out"),
      frame("2", big),
      frame("1"),
      frame("X", "exit:3"),
    ]);
    for (const step of [1, 3, 5, 4096, wire.length]) {
      const frames: string[] = [];
      const pieces: Record<string, Buffer[]> = { "1": [], "2": [] };
      const r = new FrameReader(new Set(["1", "2"]));
      for (let i = 0; i < wire.length; i += step) {
        const chunk = Buffer.from(wire.subarray(i, i + step));
        r.push(chunk, {
          frame: (t, p) => frames.push(`${t}:${p.length}`),
          piece: (t, p) => {
            expect(p.buffer).toBe(chunk.buffer);
            pieces[t].push(p);
          },
        });
      }
      expect(frames).toEqual(["P:2", "1:0", "X:6"]);
      expect(Buffer.concat(pieces["1"]).toString()).toBe("out");
      expect(Buffer.concat(pieces["2"]).equals(big)).toBe(true);
    }
  });

  it("encodes a request as NUL-terminated fields and refuses NUL bytes", () => {
    const f = encodeRequest({ cgroup: "xab", cwd: "/w", argv: ["sh", "-c", "echo"], env: { A: "1" } });
    expect(f[0]).toBe("R".charCodeAt(0));
    expect(f.subarray(5).toString()).toBe("exec\0xab\0/w\x003\0sh\0-c\0echo\x001\0A=1\0");
    expect(() => encodeRequest({ cgroup: "x", cwd: "/", argv: ["a\0b"], env: {} })).toThrow(/NUL byte/);
  });
});

describe("WarmPool", () => {
  // The test starts slots itself: each startSlot call waits until the test resolves it, so the
  // pool's progress is driven step by step instead of by sleeping (the pool has no timer on
  // this path; setImmediate only lets its promise chain run).
  function manualStarts() {
    let n = 0;
    const pending: (() => void)[] = [];
    const startSlot = () => new Promise<string>((resolve) => pending.push(() => resolve(`slot-${++n}`)));
    return { startSlot, pending };
  }
  const settle = () => new Promise((r) => setImmediate(r));

  it("fills to the target one start at a time, hands out ready slots, and refills what was taken", async () => {
    const starts = manualStarts();
    const pool = new WarmPool<string>([{ profile: "base", size: "nano", count: 2 }], {
      startSlot: starts.startSlot,
      onError: () => {},
    });
    expect(pool.take("base", "nano", () => true)).toBeUndefined();
    for (let i = 0; i < 2; i++) {
      await settle();
      expect(starts.pending).toHaveLength(1); // never more than one start in flight
      starts.pending.shift()!();
    }
    await settle();
    expect(starts.pending).toHaveLength(0);
    expect(pool.all()).toEqual(["slot-1", "slot-2"]);
    expect(pool.take("base", "nano", () => true)).toBe("slot-1");
    expect(pool.take("base", "small", () => true)).toBeUndefined();
    await settle();
    expect(starts.pending).toHaveLength(1);
    starts.pending.shift()!();
    await settle();
    expect(pool.all()).toEqual(["slot-2", "slot-3"]);
    // an unusable slot (e.g. died meanwhile) is skipped, not handed out
    expect(pool.take("base", "nano", (s) => s !== "slot-2")).toBe("slot-3");
    expect(pool.adopt("base", "nano", "adopted")).toBe(true);
    expect(pool.adopt("other", "nano", "x")).toBe(false);
    pool.close();
  });
});
