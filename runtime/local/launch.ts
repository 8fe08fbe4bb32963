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
}

/** Paths inside the sandbox. */
export const IN_SANDBOX = {
  workspace: "/workspace",
  helper: "/.sbx/helper",
  runDir: "/.sbx/run",
  socket: "/.sbx/run/helper.sock",
} as const;

/** Host directories that make up the read-only system of the "host" profile. */
export const HOST_SYSTEM_DIRS = ["usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32"];

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
  return args;
}
