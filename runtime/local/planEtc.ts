// Pure: the /etc a sandbox of the "host" profile sees. Not the host's /etc: that names the
// host's users (passwd), its network (hosts, resolv.conf), its machine id and its services'
// configuration. A sandbox gets files of its own (passwd and group with its one user, hosts,
// hostname, resolv.conf, nsswitch.conf, UTC as its time zone) and, read-only from the host, only
// what the system in /usr needs to work: the alternatives that /usr/bin links through, the
// dynamic linker's cache, the CA certificates, the distribution's name, the netdb tables, and
// the configuration directories of language runtimes (Python's sitecustomize, Java's conf).

/** What the host has at a path under /etc (absent paths are left out). */
export type HostEtcEntry = { kind: "dir" } | { kind: "file" } | { kind: "symlink"; target: string };
/** relative path under /etc -> what the host has there */
export type HostEtc = Record<string, HostEtcEntry>;

/** Paths under /etc a sandbox takes from the host when present: system data, nothing about the host. */
export const HOST_ETC_KEPT = [
  "alternatives", // /usr/bin/awk, cc, c++, editor, java ... link through it
  "ld.so.cache",
  "ld.so.conf",
  "ld.so.conf.d",
  "ssl/certs", // the CA bundle (ca-certificates.crt) and its hashed links into /usr/share
  "ssl/openssl.cnf",
  "os-release", // which distribution: pip's and Python's platform report it
  "debian_version",
  "lsb-release",
  "protocols", // netdb: getprotobyname, getservbyname
  "services",
  "rpc",
  "mime.types", // Python's mimetypes
  "bash.bashrc", // an interactive shell (a terminal) reads them
  "inputrc",
  "profile",
] as const;

/** Top-level names under /etc kept by pattern: language runtimes' configuration, one per version. */
export const HOST_ETC_PATTERNS: readonly RegExp[] = [/^python3(\.\d+)?$/, /^java-\d+-openjdk$/];

/** The sandbox's one user; E2B's SDK calls it "user". Home is the workspace. */
export const SANDBOX_USER = "user";

export interface SandboxEtc {
  /** paths under /etc bound read-only from the host's same path */
  binds: string[];
  symlinks: { path: string; target: string }[];
  /** files written into the sandbox's own (read-only) root, owned by root; mode 0644 unless given */
  files: { path: string; content: string; mode?: number }[];
}

/** The relative paths under /etc to look at on the host, given the names at its top level. */
export function wantedHostEtc(topLevel: readonly string[]): string[] {
  const byPattern = topLevel.filter((n) => HOST_ETC_PATTERNS.some((p) => p.test(n))).sort();
  return [...HOST_ETC_KEPT, ...byPattern];
}

export function planSandboxEtc(host: HostEtc, who: { uid: number; hostname: string }): SandboxEtc {
  const binds: string[] = [];
  const symlinks: SandboxEtc["symlinks"] = [
    { path: "localtime", target: "/usr/share/zoneinfo/Etc/UTC" },
    { path: "mtab", target: "../proc/self/mounts" },
  ];
  for (const [rel, entry] of Object.entries(host)) {
    // a symlink is recreated, not followed: its target is in /usr (os-release) or relative
    if (entry.kind === "symlink") symlinks.push({ path: rel, target: entry.target });
    else binds.push(rel);
  }
  return { binds, symlinks, files: ownFiles(who) };
}

function ownFiles({ uid, hostname }: { uid: number; hostname: string }): SandboxEtc["files"] {
  return [
    {
      path: "passwd",
      content: [
        "root:x:0:0:root:/root:/bin/bash",
        `${SANDBOX_USER}:x:${uid}:${uid}:sandbox user:/workspace:/bin/bash`,
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin",
        "",
      ].join("\n"),
    },
    // as on any system: there, and not readable by the sandbox's user (no password is set)
    {
      path: "shadow",
      content: [
        "root:*:19000:0:99999:7:::",
        `${SANDBOX_USER}:*:19000:0:99999:7:::`,
        "nobody:*:19000:0:99999:7:::",
        "",
      ].join("\n"),
      mode: 0o640,
    },
    { path: "group", content: ["root:x:0:", `${SANDBOX_USER}:x:${uid}:`, "nogroup:x:65534:", ""].join("\n") },
    {
      path: "hosts",
      content: `127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t${hostname}\n`,
    },
    { path: "hostname", content: `${hostname}\n` },
    // the sandbox's network is its own loopback: no name server of the host's is reachable, or named
    { path: "resolv.conf", content: "nameserver 127.0.0.1\n" },
    {
      path: "nsswitch.conf",
      content:
        "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\nethers: files\nrpc: files\n",
    },
    { path: "timezone", content: "Etc/UTC\n" },
  ];
}
