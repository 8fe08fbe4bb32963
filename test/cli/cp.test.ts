// `sbx cp` through the real CLI (bin/sbx.mjs as a child process, as a user runs it) against the
// service on the REAL local backend over a socket: a copy either arrives whole with exit 0 or
// fails with a non-zero exit and a message saying what failed (issue 10 item 7): unreadable or
// missing remote paths, a download cut mid-stream, a local tar that fails either way.
import { type ChildProcess, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HELD_TAIL_BYTES } from "../../runtime/core/heldTail.ts";
import {
  auth,
  createReadySandbox,
  type LocalRuntime,
  parseExecFrames,
  startLocalRuntime,
  TOKENS,
} from "../support/local.ts";

const repo = resolve(import.meta.dirname, "../..");
let rt: LocalRuntime;
let url: string;
let id: string;
let work: string;

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "sbx-cp-"));
  rt = await startLocalRuntime();
  url = await rt.app.listen({ host: "127.0.0.1", port: 0 });
  id = await createReadySandbox(rt);
  // 4 GiB sparse: tar needs many seconds for it, the test stops it within the first megabytes
  await sh("truncate -s 4G /workspace/huge && head -c 3000000 /dev/urandom > /workspace/some");
}, 120_000);

afterAll(async () => {
  await rt?.close();
  rmSync(work, { recursive: true, force: true });
});

async function sh(script: string): Promise<string> {
  const res = await rt.app.inject({
    method: "POST",
    url: `/v1/sandboxes/${id}/exec`,
    headers: auth("alice"),
    payload: { command: ["sh", "-c", script], timeoutMs: 60_000 },
  });
  const f = parseExecFrames(res.body);
  if (f.error) throw new Error(`exec ${script}: ${f.error.message}`);
  return f.stdout;
}

interface CliRun {
  child: ChildProcess;
  done: Promise<{ code: number | null; stdout: string; stderr: string }>;
}

function sbx(args: string[], server = url): CliRun {
  const child = spawn(process.execPath, [join(repo, "bin/sbx.mjs"), ...args], {
    cwd: work,
    env: { ...process.env, SBX_SERVER: server, SBX_TOKEN: TOKENS.alice },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (c) => (stdout += c));
  child.stderr!.on("data", (c) => (stderr += c));
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((res, rej) => {
    const guard = setTimeout(() => {
      child.kill("SIGKILL");
      rej(new Error(`sbx ${args.join(" ")} did not finish in 90 s: ${stderr}`));
    }, 90_000);
    child.on("error", rej);
    child.on("close", (code) => {
      clearTimeout(guard);
      res({ code, stdout, stderr });
    });
  });
  return { child, done };
}

const sha = (file: string) => createHash("sha256").update(readFileSync(file)).digest("hex");

/** Bytes the sandbox's tar has written so far, or undefined while none runs. */
async function tarWritten(): Promise<number | undefined> {
  const out = await sh("pid=$(pgrep -x tar) && sed -n 's/^wchar: //p' /proc/$pid/io");
  return out.trim() ? Number(out.trim()) : undefined;
}

async function until<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  ok: (v: T) => boolean,
  timeoutMs = 30_000,
): Promise<T> {
  const t0 = Date.now();
  for (;;) {
    const v = await probe();
    if (v !== undefined && ok(v)) return v;
    if (Date.now() - t0 > timeoutMs) throw new Error(`${what}: not reached in ${timeoutMs} ms (last ${String(v)})`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("sbx cp fails loudly", () => {
  it("copies a file in and out whole, exit 0", async () => {
    const out = join(work, "ok");
    const down = await sbx(["cp", `${id}:/workspace/some`, out]).done;
    expect(down.code, down.stderr).toBe(0);
    const up = await sbx(["cp", join(out, "some"), `${id}:/workspace/back`]).done;
    expect(up.code, up.stderr).toBe(0);
    expect((await sh("sha256sum /workspace/back/some")).split(" ")[0]).toBe(sha(join(out, "some")));
  }, 60_000);

  it.each([
    { path: "/etc/shadow", code: 2, says: ['path: invalid value "/etc/shadow"', "not readable by the sandbox's user"] },
    { path: "/workspace/missing", code: 4, says: ['path "/workspace/missing" not found'] },
  ])(
    "cp ID:$path exits $code, names the path, copies nothing",
    async ({ path, code, says }) => {
      const out = join(work, `refused-${code}`);
      const r = await sbx(["cp", `${id}:${path}`, out]).done;
      expect(r.code, r.stderr).toBe(code);
      for (const s of says) expect(r.stderr).toContain(s);
      expect(r.stdout).toBe("");
      expect(readdirSync(out)).toEqual([]);
    },
    60_000,
  );

  it("a download cut mid-stream exits 8 and says it broke off", async () => {
    const out = join(work, "cut");
    const run = sbx(["cp", `${id}:/workspace/huge`, out]);
    // stop the CLI once the download runs (it then reads nothing more, so tar cannot finish),
    // let tar fill the buffers past what the service holds back, so bytes reached the client
    await until("the sandbox's tar starts", tarWritten, () => true);
    run.child.kill("SIGSTOP");
    const written = await until("tar writes past the held tail", tarWritten, (n) => n > HELD_TAIL_BYTES + 256 * 1024);
    expect(written).toBeLessThan(4 * 1024 ** 3);
    expect((await sh("pkill -KILL -x tar; echo $?")).trim()).toBe("0");
    run.child.kill("SIGCONT");
    const r = await run.done;
    expect(r.code, r.stderr).toBe(8);
    expect(r.stderr).toMatch(
      new RegExp(
        `^sbx: download of ${id}:/workspace/huge broke off after \\d+ bytes .*the archive is incomplete, retry the copy; ${out} may hold part of the files\\n$`,
      ),
    );
    expect(r.stdout).toBe("");
  }, 90_000);

  it("an upload whose connection drops mid-stream exits 8 and says the connection was lost", async () => {
    // a stand-in for a service that dies mid-upload: it takes 1 MB of the request, then resets
    const cutter = net.createServer((sock) => {
      let got = 0;
      sock.on("error", () => undefined);
      sock.on("data", (c: Buffer) => {
        got += c.length;
        if (got > 1_000_000) sock.resetAndDestroy();
      });
    });
    await new Promise<void>((r) => cutter.listen(0, "127.0.0.1", r));
    try {
      const big = join(work, "big.bin");
      writeFileSync(big, randomBytes(16 * 1024 * 1024));
      const port = (cutter.address() as net.AddressInfo).port;
      const r = await sbx(["cp", big, `${id}:/workspace/cut-up`], `http://127.0.0.1:${port}`).done;
      expect(r.code, r.stderr).toBe(8);
      expect(r.stderr).toMatch(
        new RegExp(
          `^sbx: the connection to http://127\\.0\\.0\\.1:${port}/v1/sandboxes/${id}/files\\?path=%2Fworkspace%2Fcut-up was lost during the PUT \\(.+\\): .*may have been applied in part; check the service and retry\\n$`,
        ),
      );
    } finally {
      cutter.close();
    }
  }, 60_000);

  it("a local tar that cannot unpack exits 1 with tar's message", async () => {
    const out = join(work, "blocked");
    mkdirSync(join(out, "some", "in-the-way"), { recursive: true }); // a non-empty directory where the file goes
    const r = await sbx(["cp", `${id}:/workspace/some`, out]).done;
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toContain(
      `sbx: copy of ${id}:/workspace/some to ${out} failed: local tar -C ${out} -xf - failed (exit 2)`,
    );
  }, 60_000);

  it("an upload whose local tar fails (a write-only file) exits 1 and the sandbox gets none of it", async () => {
    // GNU tar writes a well-formed archive of what it could read and exits 2: without the held
    // end the sandbox would unpack it as a complete copy. Sysfs refuses even root a read of
    // its write-only attributes, so this fails the same for every user. Which buses exist
    // depends on the machine (a VM may have no PCI): take one whose drivers_probe is there,
    // the cpu bus (on every x86_64 kernel) first.
    const buses = ["cpu", "platform", ...readdirSync("/sys/bus")];
    const bus = buses.find((b) => existsSync(`/sys/bus/${b}/drivers_probe`));
    expect(bus, "this test needs a bus in /sys/bus with a write-only drivers_probe attribute").toBeDefined();
    const r = await sbx(["cp", `/sys/bus/${bus}`, `${id}:/workspace/up`]).done;
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toContain(
      `sbx: copy of /sys/bus/${bus} to ${id}:/workspace/up failed: local tar -C /sys/bus -cf - ${bus} failed (exit 2)`,
    );
    expect(r.stderr).toContain("drivers_probe: Cannot open: Permission denied");
    expect(r.stderr).toContain("the upload was aborted");
    expect(await sh("ls -A /workspace/up 2>/dev/null | wc -l")).toBe("0\n");
  }, 60_000);
});
