// Pure: the bubblewrap command line for one sandbox. No I/O except what the caller passes in.
//
// Namespaces: pid (the helper is PID 1, so killing it ends everything), net (loopback only),
// ipc, uts, mount. Not user: bubblewrap runs as root without a user namespace and the helper
// drops to the sandbox's own unprivileged uid with an empty bounding set, which is simpler to
// reason about than root-in-a-userns and keeps the kernel's userns attack surface closed.
// Not cgroup: the helper must write cgroup.procs of cgroups outside the namespace root.

export interface LaunchPlan {
  /** "host" or the path of an unpacked rootfs */
  rootfs: string;
  /** host paths */
  runDir: string;
  helperPath: string;
  uid: number;
  hostname: string;
  tmpBytes: number;
  /** fds the helper inherits: the readiness pipe, one directory fd per cgroup hierarchy, the workspace image, the host's /dev */
  readyFd: number;
  cgroupFds: number[];
  workspaceFd: number;
  devFd: number;
  /** host top-level entries: name -> symlink target, or null for a directory (host rootfs only) */
  hostTopLevel: Record<string, string | null>;
  /** the sandbox's own /etc (host rootfs only; planEtc.ts), its files as fds the helper's bwrap reads */
  etc?: LaunchEtc;
}

/** A planned /etc (planEtc.ts) whose own files are open fds, paths relative to /etc. */
export interface LaunchEtc {
  binds: string[];
  symlinks: { path: string; target: string }[];
  files: { path: string; fd: number; mode?: number }[];
}

/** Paths inside the sandbox. */
export const IN_SANDBOX = {
  workspace: "/workspace",
  helper: "/.sbx/helper",
  runDir: "/.sbx/run",
  socket: "/.sbx/run/helper.sock",
} as const;

/** Host directories that make up the read-only system of the "host" profile; /etc is the sandbox's own. */
export const HOST_SYSTEM_DIRS = ["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"];

const SHM_BYTES = 64 * 1024 * 1024;

export function planBwrapArgs(p: LaunchPlan): string[] {
  const args = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--as-pid-1", "--new-session"];
  args.push(
    "--hostname",
    p.hostname,
    "--clearenv",
    "--setenv",
    "PATH",
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
  );
  if (p.rootfs === "host") {
    for (const name of HOST_SYSTEM_DIRS) {
      if (!(name in p.hostTopLevel)) continue;
      const target = p.hostTopLevel[name];
      if (target === null) args.push("--ro-bind", `/${name}`, `/${name}`);
      else args.push("--symlink", target, `/${name}`);
    }
    if (p.etc) args.push(...etcArgs(p.etc));
  } else {
    args.push("--ro-bind", p.rootfs, "/");
  }
  args.push("--proc", "/proc", "--dev", "/dev");
  args.push("--perms", "1777", "--size", String(p.tmpBytes), "--tmpfs", "/tmp");
  args.push("--perms", "1777", "--size", String(Math.min(SHM_BYTES, p.tmpBytes)), "--tmpfs", "/dev/shm");
  if (p.rootfs === "host") args.push("--dir", IN_SANDBOX.workspace);
  args.push("--ro-bind", p.helperPath, IN_SANDBOX.helper);
  args.push("--bind", p.runDir, IN_SANDBOX.runDir);
  if (p.rootfs === "host") args.push("--remount-ro", "/");
  args.push("--chdir", "/", "--", IN_SANDBOX.helper);
  args.push(
    "--uid",
    String(p.uid),
    "--gid",
    String(p.uid),
    "--socket",
    IN_SANDBOX.socket,
    "--ready-fd",
    String(p.readyFd),
  );
  for (const fd of p.cgroupFds) args.push("--cg-fd", String(fd));
  args.push("--workspace-fd", String(p.workspaceFd), "--workspace", IN_SANDBOX.workspace, "--dev-fd", String(p.devFd));
  // once its socket is bound the helper unmounts both: their sources are host paths (the state
  // dir, the checkout) that /proc/self/mountinfo would show a tenant
  args.push("--unmount", IN_SANDBOX.runDir, "--unmount", IN_SANDBOX.helper);
  return args;
}

/** /etc in the sandbox's root tmpfs: host paths read-only, symlinks, and its own files copied from fds. */
function etcArgs(etc: LaunchEtc): string[] {
  const args = ["--perms", "0755", "--dir", "/etc"];
  // bwrap makes missing parents root-only (0700): /etc/ssl must be readable for /etc/ssl/certs
  const paths = [...etc.binds, ...etc.symlinks.map((l) => l.path), ...etc.files.map((f) => f.path)];
  const parents = new Set(
    paths.flatMap((p) =>
      p
        .split("/")
        .slice(0, -1)
        .map((_, i, parts) => parts.slice(0, i + 1).join("/")),
    ),
  );
  for (const dir of [...parents].sort()) args.push("--perms", "0755", "--dir", `/etc/${dir}`);
  for (const rel of etc.binds) args.push("--ro-bind", `/etc/${rel}`, `/etc/${rel}`);
  for (const l of etc.symlinks) args.push("--symlink", l.target, `/etc/${l.path}`);
  for (const f of etc.files)
    args.push("--perms", (f.mode ?? 0o644).toString(8).padStart(4, "0"), "--file", String(f.fd), `/etc/${f.path}`);
  return args;
}
