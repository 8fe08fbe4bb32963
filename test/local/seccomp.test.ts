// The syscall filter every sandbox command runs under (tools/local-helper/seccomp.c), proven
// in real sandboxes: what it denies, how a tenant sees it, and that ordinary work still runs.
// Run it with the filter's call in sbx-helper.c commented out and the denials below fail.
import fs from "node:fs";
import path from "node:path";
import { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createReady, type Harness, run, startBackend } from "./harness.ts";
import { probeI386Abi, ptraceScope } from "./host-kernel.ts";

const PROBE_SOURCE = fs.readFileSync(
  path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures/seccomp-probe.c"),
);
// what the host's kernel does outside any sandbox, probed once (see host-kernel.ts)
const I386 = probeI386Abi();
const PTRACE_SCOPE = ptraceScope();
// a busy 2-core machine compiles in seconds; the bound only stops a hung command
const SLOW = { timeoutMs: 120_000 };

let h: Harness;
let id: string;

beforeAll(async () => {
  h = await startBackend();
  id = await createReady(h);
  // gcc runs inside the sandbox, under the filter: compiling is itself one of the checks
  const put = await run(
    h.backend,
    id,
    ["sh", "-c", "cat > /workspace/probe.c && gcc -O2 -Wall -o /workspace/probe /workspace/probe.c"],
    { stdin: PROBE_SOURCE, ...SLOW },
  );
  if (put.exitCode !== 0) throw new Error(`compiling the probe in the sandbox failed: ${put.stderr}`);
}, 180_000);
afterAll(async () => {
  await h?.backend.close();
});

describe("local sandbox seccomp filter", () => {
  it("is in force for every command: Seccomp 2 (filter) in /proc/self/status, also for a background child", async () => {
    const r = await run(
      h.backend,
      id,
      "grep -E '^Seccomp(_filters)?:' /proc/self/status; grep '^Seccomp:' /proc/self/status & wait",
    );
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toMatch(/^Seccomp:\s+2$/m);
    expect(r.stdout).toMatch(/^Seccomp_filters:\s+1$/m);
    expect(r.stdout.match(/^Seccomp:\s+2$/gm)).toHaveLength(2);
  });

  it("refuses user namespaces: unshare -Ur fails with EPERM", async () => {
    const r = await run(h.backend, id, ["unshare", "-Ur", "true"]);
    expect(r.exitCode).not.toBe(0);
    expect(r.stderr).toMatch(/unshare failed: Operation not permitted/);
  });

  it("answers each denied syscall as documented (EPERM; ENOSYS for clone3 and unknown numbers)", async () => {
    const r = await run(h.backend, id, ["/workspace/probe"]);
    expect(r.exitCode).toBe(0);
    const got = Object.fromEntries(
      r.stdout
        .trim()
        .split("\n")
        .map((l) => l.split(" ")),
    );
    expect(got).toEqual({
      clone_newuser: "EPERM",
      unshare: "EPERM",
      clone3: "ENOSYS",
      setns: "EPERM",
      io_uring_setup: "EPERM",
      keyctl: "EPERM",
      add_key: "EPERM",
      bpf: "EPERM",
      perf_event_open: "EPERM",
      personality_addr_no_randomize: "EPERM",
      personality_query: "ok",
      socket_vsock: "EPERM",
      socket_alg: "EPERM",
      name_to_handle_at: "EPERM",
      modify_ldt: "EPERM",
      kcmp: "EPERM",
      unknown_500: "ENOSYS",
      getpid: "ok",
    });
  });

  // where the kernel runs the i386 ABI, the filter is what stops int $0x80; where the kernel has it
  // off, the CPU's fault kills the process before any filter sees it: the path is closed either way
  it(
    I386.runs
      ? "kills a process that makes a syscall through the int80 ABI (SIGSYS, 128+31): this kernel runs the i386 ABI outside the sandbox, so the filter is what stops it"
      : `kills a process that makes a syscall through the int80 ABI (${I386.signal}, 128+${I386.signalNumber}): this kernel has the i386 ABI off (a bare int $0x80 outside any sandbox dies of ${I386.signal} too), so the kernel closes it before the filter`,
    async () => {
      const r = await run(h.backend, id, ["/workspace/probe", "int80"]);
      expect(r.exitCode).toBe(I386.runs ? 128 + 31 : 128 + I386.signalNumber);
      expect(r.stdout).toBe("");
    },
  );

  // an x32 number reaches the filter on every x86_64 kernel (with or without CONFIG_X86_X32_ABI):
  // seccomp runs before the kernel dispatches it
  it("kills a process that makes a syscall through the x32 ABI (SIGSYS, 128+31)", async () => {
    const r = await run(h.backend, id, ["/workspace/probe", "x32"]);
    expect(r.exitCode).toBe(159);
    expect(r.stdout).toBe("");
  });

  it("denies io_uring_setup and keyctl to python3 through ctypes too", async () => {
    const py = `
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
for name, args in (("io_uring_setup", (425, 1, params)), ("keyctl", (250, 0, -3, 0))):
    rc = libc.syscall(*args)
    print(name, rc, errno.errorcode.get(ctypes.get_errno(), "0"))
`;
    const r = await run(h.backend, id, ["python3", "-c", py]);
    expect(r.stderr).toBe("");
    expect(r.stdout.trim().split("\n")).toEqual(["io_uring_setup -1 EPERM", "keyctl -1 EPERM"]);
  });

  it(
    PTRACE_SCOPE < 2
      ? "lets a tenant trace its own processes, but not the helper (PID 1), which is non-dumpable"
      : `does not let a tenant trace the helper (PID 1), which is non-dumpable; nor its own processes, as Yama's ptrace_scope ${PTRACE_SCOPE} on this host forbids that`,
    async () => {
      const py = `
import ctypes, errno, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_DETACH = 16, 17
child = os.fork()
if child == 0:
    time.sleep(30); os._exit(0)
own = libc.ptrace(PTRACE_ATTACH, child, 0, 0)
if own == 0:
    os.waitpid(child, 0); libc.ptrace(PTRACE_DETACH, child, 0, 0)
os.kill(child, signal.SIGKILL); os.waitpid(child, 0)
helper = libc.ptrace(PTRACE_ATTACH, 1, 0, 0)
print(own, helper, errno.errorcode.get(ctypes.get_errno(), "0"))
`;
      const r = await run(h.backend, id, ["python3", "-c", py]);
      expect(r.stderr).toBe("");
      expect(r.stdout.trim()).toBe(PTRACE_SCOPE < 2 ? "0 -1 EPERM" : "-1 -1 EPERM");
    },
  );
});

describe("ordinary work under the filter", () => {
  it("runs python3 with threads, a subprocess and a multiprocessing pool", async () => {
    const py = `
import threading, subprocess, multiprocessing, hashlib, json
out = []
t = threading.Thread(target=lambda: out.append("thread")); t.start(); t.join()
out.append(subprocess.run(["echo", "child"], capture_output=True, text=True).stdout.strip())
with multiprocessing.Pool(2) as p: out.append(sum(p.map(abs, [-1, -2, 3])))
out.append(hashlib.sha256(b"x").hexdigest()[:8])
print(json.dumps(out))
`;
    const r = await run(h.backend, id, ["python3", "-c", py], SLOW);
    expect(r.stderr).toBe("");
    expect(JSON.parse(r.stdout)).toEqual(["thread", "child", 6, "2d711642"]);
  });

  it("runs node with a worker thread, fs and a child process", async () => {
    const js = `
const { Worker } = require("node:worker_threads");
const fs = require("node:fs");
const { execFileSync } = require("node:child_process");
fs.writeFileSync("/workspace/n.txt", "file");
const w = new Worker("require('node:worker_threads').parentPort.postMessage('worker')", { eval: true });
w.on("message", (m) => console.log(JSON.stringify([m, fs.readFileSync("/workspace/n.txt", "utf8"), execFileSync("echo", ["child"]).toString().trim()])));
`;
    const r = await run(h.backend, id, ["node", "-e", js], SLOW);
    expect(r.stderr).toBe("");
    expect(JSON.parse(r.stdout)).toEqual(["worker", "file", "child"]);
  });

  it("compiles and runs a threaded C program with gcc", async () => {
    const c = `#include <pthread.h>
#include <stdio.h>
static void *work(void *a) { *(int *)a *= 2; return NULL; }
int main(void) { int v = 21; pthread_t t; pthread_create(&t, NULL, work, &v); pthread_join(t, NULL); printf("%d\\n", v); return 0; }
`;
    const r = await run(h.backend, id, ["sh", "-c", "cd /workspace && cat > t.c && gcc -O2 -pthread -o t t.c && ./t"], {
      stdin: Buffer.from(c),
      ...SLOW,
    });
    expect(r.stderr).toBe("");
    expect(r.stdout).toBe("42\n");
  });

  it("runs tar and sh pipelines, and sbx cp's tar streams in and out", async () => {
    const r = await run(
      h.backend,
      id,
      "cd /workspace && mkdir -p d && seq 1 1000 > d/n && tar -czf d.tgz d && rm -r d && tar -xzf d.tgz && sort -rn d/n | head -1 | tr 0 o",
    );
    expect(r).toMatchObject({ exitCode: 0, stdout: "1ooo\n", stderr: "" });
    const chunks: Buffer[] = [];
    for await (const c of await h.backend.getArchive(id, "/workspace/d")) chunks.push(Buffer.from(c));
    await h.backend.putArchive(id, "/workspace/copy", Readable.from([Buffer.concat(chunks)]));
    const back = await run(h.backend, id, "cmp /workspace/d/n /workspace/copy/d/n && echo same");
    expect(back).toMatchObject({ exitCode: 0, stdout: "same\n" });
  });
});
