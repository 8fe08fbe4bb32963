// What this machine's kernel does OUTSIDE any sandbox, for the tests whose right answer depends on
// it. Machines differ (a kernel may run the i386 ABI or have it off at run time; Yama may forbid
// ptrace): a test reads the fact here, asserts what holds on this kind of machine and says in its
// name which kind it checked, rather than assuming one kind or skipping.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures");

/** How the host's kernel treats a syscall through `int $0x80` (the i386 ABI) from a 64-bit process. */
export type I386Abi = { runs: true } | { runs: false; signal: NodeJS.Signals; signalNumber: number };

/**
 * Compiles test/local/fixtures/seccomp-probe.c with the host's gcc and runs `probe int80` outside
 * any sandbox: it either returns (the kernel runs the i386 ABI) or dies of a signal (the ABI is
 * off: CONFIG_IA32_EMULATION unset, ia32_emulation=0, or a hypervisor that refuses it).
 */
export function probeI386Abi(): I386Abi {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sbx-abi-probe-"));
  try {
    const bin = path.join(dir, "probe");
    const cc = spawnSync("gcc", ["-O2", "-o", bin, path.join(FIXTURES, "seccomp-probe.c")], { encoding: "utf8" });
    if (cc.error || cc.status !== 0)
      throw new Error(
        `cannot compile the ABI probe on the host (${cc.error?.message ?? cc.stderr.trim()}); install gcc and libc6-dev (apt-get install -y gcc libc6-dev, or scripts/install-debian.sh)`,
      );
    const r = spawnSync(bin, ["int80"], { encoding: "utf8", timeout: 10_000 });
    if (r.status === 0 && /^int80 returned \d+\n$/.test(r.stdout)) return { runs: true };
    if (r.signal && r.signal !== "SIGTERM") {
      return { runs: false, signal: r.signal, signalNumber: os.constants.signals[r.signal] };
    }
    throw new Error(
      `the ABI probe outside the sandbox neither returned nor died of a signal: status ${r.status}, signal ${r.signal}, stdout ${JSON.stringify(r.stdout)}, stderr ${JSON.stringify(r.stderr)}`,
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Yama's ptrace scope (/proc/sys/kernel/yama/ptrace_scope): 0 or 1 let a process trace its own
 * children, 2 only with CAP_SYS_PTRACE, 3 never. 0 when Yama is not built in (no such file).
 */
export function ptraceScope(): number {
  try {
    return Number(fs.readFileSync("/proc/sys/kernel/yama/ptrace_scope", "utf8").trim());
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return 0;
    throw err;
  }
}
