// End to end over a real socket: `npm start` as a child process (local platform, its own state
// dir), the `sbx` CLI as child processes talking to it, the whole lifecycle, then Ctrl-C
// (SIGINT to the process group) and nothing of it left running.
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { PassThrough } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../../runtime/cli/main.ts";

const repo = resolve(import.meta.dirname, "../..");
let work: string;
let stateDir: string;
let service: ChildProcess;
let serviceOut = "";
let url = "";
let token = "";
/** a safety net: normally the Ctrl-C test has stopped the service and with it its registry */
function stopEmbeddedRegistry(): void {
  const pidFile = join(stateDir, "registry", "registry.pid");
  if (!existsSync(pidFile)) return;
  try {
    process.kill(Number(readFileSync(pidFile, "utf8")), "SIGKILL");
  } catch {
    // stopped with the service
  }
}

/** Processes whose command line mentions dir (read from /proc: nothing truncates it). */
function processesUsing(dir: string): string[] {
  const out: string[] = [];
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    let cmd = "";
    try {
      cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
    } catch {
      continue; // exited while we looked
    }
    if (cmd.includes(dir)) out.push(`${pid} ${cmd}`);
  }
  return out;
}

interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Polls until `ok()`; the bound is a safety net far above any normal wait, never the assertion. */
async function waitFor(ok: () => boolean, timeoutMs: number): Promise<void> {
  const t0 = Date.now();
  while (!ok() && Date.now() - t0 < timeoutMs) await new Promise((r) => setTimeout(r, 100));
}

function sbx(args: string[], env: Record<string, string> = {}, onStdout?: (soFar: string) => void): Promise<CliResult> {
  return new Promise((resolvePromise, reject) => {
    const p = spawn(process.execPath, [join(repo, "bin/sbx.mjs"), ...args], {
      cwd: work,
      env: { ...process.env, SBX_SERVER: url, SBX_TOKEN: token, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const r: CliResult = { code: null, stdout: "", stderr: "" };
    p.stdout.on("data", (c) => {
      r.stdout += c;
      onStdout?.(r.stdout);
    });
    p.stderr.on("data", (c) => (r.stderr += c));
    p.on("error", reject);
    // a hung step names itself instead of eating the whole test's timeout
    const guard = setTimeout(() => {
      p.kill("SIGKILL");
      reject(
        new Error(
          `sbx ${args.join(" ")} did not finish in 90 s; stdout ${JSON.stringify(r.stdout)} stderr ${JSON.stringify(r.stderr)}\nservice:\n${serviceOut.slice(-2000)}`,
        ),
      );
    }, 90_000);
    p.on("close", (code) => {
      clearTimeout(guard);
      r.code = code;
      resolvePromise(r);
    });
  });
}

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "sbx-e2e-"));
  stateDir = join(work, "state");
  // no snapshots.registry: the local platform runs its own on loopback, as a fresh `npm start` does
  writeFileSync(
    join(work, "config.json"),
    JSON.stringify({ platform: "local", listen: { host: "127.0.0.1", port: 0 }, local: { stateDir } }),
  );
  service = spawn("npm", ["start", "--silent"], {
    cwd: repo,
    env: { ...process.env, SBX_CONFIG: join(work, "config.json"), SBX_LOG_LEVEL: "info" },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true, // its own process group, so the test can press "Ctrl-C" on all of it
  });
  service.stdout!.on("data", (c) => (serviceOut += c));
  service.stderr!.on("data", (c) => (serviceOut += c));
  const t0 = Date.now();
  while (!/SBX_TOKEN=(sbx_\S+)/.test(serviceOut)) {
    if (Date.now() - t0 > 60_000 || service.exitCode !== null)
      throw new Error(`npm start did not come up:\n${serviceOut}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  url = /SBX_SERVER=(http:\/\/\S+)/.exec(serviceOut)![1];
  token = /SBX_TOKEN=(sbx_\S+)/.exec(serviceOut)![1];
}, 90_000);

afterAll(async () => {
  // after a failed step the Ctrl-C test may not have run: stop the service the same way first, so
  // its sandboxes go with it (a SIGKILL alone leaves them running on the shared machine)
  if (service && !serviceOut.includes("sbx: stopped")) {
    try {
      process.kill(-service.pid!, "SIGINT");
      await waitFor(() => serviceOut.includes("sbx: stopped"), 60_000);
    } catch {
      // the group is already gone
    }
  }
  try {
    process.kill(-service.pid!, "SIGKILL");
  } catch {
    // the group is already gone: the Ctrl-C test stopped it
  }
  stopEmbeddedRegistry();
  rmSync(work, { recursive: true, force: true });
}, 90_000);

describe("npm start + sbx CLI over a real socket", () => {
  it("prints the URL, a token stored only as a hash, and a copy-paste example", () => {
    expect(serviceOut).toContain(`export SBX_SERVER=${url} SBX_TOKEN=${token}`);
    expect(serviceOut).toContain("npx sbx create");
    expect(serviceOut).toContain("npx sbx run $ID --");
    expect(serviceOut).toContain("npx sbx kill $ID");
    const tokens = readFileSync(join(stateDir, "tokens.json"), "utf8");
    expect(tokens).not.toContain(token);
    expect(Object.keys(JSON.parse(tokens))).toHaveLength(1);
  });

  it("runs the whole lifecycle through the CLI", async () => {
    const created = await sbx(["create", "--size", "nano", "--env", "WHO=e2e", "--json"]);
    expect(created.code, created.stderr).toBe(0);
    const id = JSON.parse(created.stdout).id as string;
    expect(id).toMatch(/^sbx-/);

    const waited = await sbx(["wait", id, "--timeout", "30s"]);
    expect(waited.code, waited.stderr).toBe(0);
    expect(waited.stdout).toBe(`${id} ready\n`);

    // output streams while the command runs: the command only goes on once a gate file exists, and
    // the test makes it only after the first line has reached the CLI's stdout. Output held back
    // until the exit leaves the first line missing when the safety bound opens the gate anyway.
    let firstLine = false;
    const streaming = sbx(
      ["run", id, "--", "sh", "-c", 'echo "one $WHO"; until [ -e /workspace/gate ]; do sleep 0.05; done; echo two'],
      {},
      (soFar) => {
        firstLine ||= soFar.startsWith("one e2e\n");
      },
    );
    await waitFor(() => firstLine, 60_000);
    const sawFirstLineBeforeGate = firstLine;
    const gate = await sbx(["run", id, "--", "touch", "/workspace/gate"]);
    expect(gate.code, gate.stderr).toBe(0);
    const streamed = await streaming;
    expect(streamed.code, streamed.stderr).toBe(0);
    expect(streamed.stdout).toBe("one e2e\ntwo\n");
    expect(sawFirstLineBeforeGate, "the first line reached the CLI's stdout while the command was still running").toBe(
      true,
    );

    const failed = await sbx(["run", id, "--", "sh", "-c", "echo oops >&2; exit 5"]);
    expect(failed.code).toBe(5);
    expect(failed.stderr).toBe("oops\n");

    const timedOut = await sbx(["run", id, "--timeout", "1s", "--", "sleep", "30"]);
    expect(timedOut.code).toBe(124);
    expect(timedOut.stderr).toContain("timed out");

    // cp in and out
    mkdirSync(join(work, "in"), { recursive: true });
    writeFileSync(join(work, "in", "data.txt"), "round trip\n");
    const up = await sbx(["cp", join(work, "in"), `${id}:/workspace`]);
    expect(up.code, up.stderr).toBe(0);
    const cat = await sbx(["run", id, "--", "cat", "/workspace/in/data.txt"]);
    expect(cat.stdout).toBe("round trip\n");
    const down = await sbx(["cp", `${id}:/workspace/in`, join(work, "out")]);
    expect(down.code, down.stderr).toBe(0);
    expect(readFileSync(join(work, "out", "in", "data.txt"), "utf8")).toBe("round trip\n");

    const ls = await sbx(["ls", "--json"]);
    expect(JSON.parse(ls.stdout).map((s: { id: string }) => s.id)).toContain(id);
    const human = await sbx(["ls"]);
    expect(human.stdout).toMatch(new RegExp(`^ID\\s+PHASE.*\\n${id}\\s+Running\\s+true`, "m"));
    const get = await sbx(["get", id, "--json"]);
    expect(JSON.parse(get.stdout)).toMatchObject({ id, phase: "Running", ready: true });
    const logs = await sbx(["logs", id, "--tail", "5"]);
    expect(logs.code, logs.stderr).toBe(0);

    // sandboxes of this service exist as processes until killed
    expect(processesUsing(stateDir).length).toBeGreaterThan(0);

    const kill = await sbx(["kill", id]);
    expect(kill.code, kill.stderr).toBe(0);
    const gone = await sbx(["get", id]);
    expect(gone.code).toBe(4);
    expect(gone.stderr).toContain(`sandbox "${id}" not found`);
  }, 400_000);

  it("pause and resume show progress on stderr with --progress, nothing extra with --json, and the files come back", async () => {
    const created = await sbx(["create", "--wait", "--json"]);
    expect(created.code, created.stderr).toBe(0);
    const id = JSON.parse(created.stdout).id as string;
    const fill = await sbx([
      "run",
      id,
      "--",
      "sh",
      "-c",
      "head -c 20000000 /dev/urandom > /workspace/big && sha256sum /workspace/big",
    ]);
    expect(fill.code, fill.stderr).toBe(0);

    const paused = await sbx(["pause", id, "--progress"]);
    expect(paused.code, paused.stderr).toBe(0);
    expect(paused.stdout).toBe(`${id} Paused\n`);
    // stderr is a pipe here: whole lines, no terminal control characters
    expect(paused.stderr).not.toContain("\r");
    expect(paused.stderr).toMatch(new RegExp(`^pausing ${id}: [0-9.]+ [kMG]?B, [0-9.]+ MB/s\n`));
    expect(paused.stderr).toMatch(new RegExp(`\npaused ${id}: 2[0-9]\\.[0-9] MB in [0-9.]+ s \\([0-9.]+ MB/s\\)\n$`));

    const quiet = await sbx(["resume", id, "--json"]);
    expect(quiet.code, quiet.stderr).toBe(0);
    expect(quiet.stderr).toBe("");
    expect(JSON.parse(quiet.stdout)).toMatchObject({ id, phase: "Running", ready: true });

    expect((await sbx(["pause", id])).stderr).toBe(""); // not a terminal, not asked: no progress
    const resumed = await sbx(["resume", id, "--progress", "--json"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(JSON.parse(resumed.stdout)).toMatchObject({ id, phase: "Running" });
    expect(resumed.stderr).toMatch(
      new RegExp(`^resuming ${id}: [0-9.]+ [kMG]?B of [0-9.]+ MB \\([0-9]+%\\), [0-9.]+ MB/s\n`),
    );
    expect(resumed.stderr).toMatch(new RegExp(`\nresumed ${id}: 2[0-9]\\.[0-9] MB in `));
    const check = await sbx(["run", id, "--", "sha256sum", "/workspace/big"]);
    expect(check.stdout).toBe(fill.stdout);

    const bad = await sbx(["pause", id, "--progres"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("usage: sbx pause ID [--progress] [--json]");
    expect((await sbx(["kill", id])).code).toBe(0);
  }, 300_000);

  it("on a terminal, progress is redrawn in place by default; --json turns it off", async () => {
    // the CLI in-process with a stderr that says it is a terminal
    const cli = async (args: string[]) => {
      const stdout = new PassThrough();
      const stderr = Object.assign(new PassThrough(), { isTTY: true });
      let out = "";
      let err = "";
      stdout.on("data", (c) => (out += c));
      stderr.on("data", (c) => (err += c));
      const code = await runCli(args, {
        env: { SBX_SERVER: url, SBX_TOKEN: token },
        io: { stdout, stderr, stdin: new PassThrough() },
      });
      return { code, out, err };
    };
    const created = await cli(["create", "--wait", "--json"]);
    const id = JSON.parse(created.out).id as string;
    await cli(["run", id, "--", "sh", "-c", "head -c 5000000 /dev/urandom > /workspace/f"]);
    const paused = await cli(["pause", id]);
    expect(paused.code, paused.err).toBe(0);
    expect(paused.err).toMatch(new RegExp(`^\r\x1b\\[Kpausing ${id}: `));
    expect(paused.err).toMatch(new RegExp(`\r\x1b\\[Kpaused ${id}: 5\\.[0-9] MB in [0-9.]+ s \\([0-9.]+ MB/s\\)\n$`));
    const json = await cli(["resume", id, "--json"]);
    expect(json.code, json.err).toBe(0);
    expect(json.err).toBe("");
    expect((await cli(["kill", id])).code).toBe(0);
  }, 120_000);

  it.each([
    { args: ["create", "--size", "huge"], env: {}, code: 2, err: 'size: invalid value "huge"' },
    { args: ["create", "--ttl", "soon"], env: {}, code: 2, err: '--ttl: invalid value "soon"' },
    { args: ["ls"], env: { SBX_TOKEN: "sbx_wrong" }, code: 3, err: "missing or invalid bearer token" },
    { args: ["get", "sbx-aaaaaaaaaaaaaaaa"], env: {}, code: 4, err: "not found" },
    { args: ["frobnicate"], env: {}, code: 2, err: "unknown command" },
    {
      args: ["ls"],
      env: { SBX_SERVER: "" },
      code: 2,
      err: "the local platform runs sandboxes inside the service; start it with `npm start`",
    },
  ])("exit code $code for sbx $args", async ({ args, env, code, err }) => {
    const r = await sbx(args, env as Record<string, string>);
    expect(r.code).toBe(code);
    expect(r.stderr).toContain(err);
  });

  it("bench create prints create-accept percentiles as JSON", async () => {
    const r = await sbx(["bench", "create", "--count", "8", "--concurrency", "4", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report).toMatchObject({ op: "create-accept", concurrency: 4, requested: 8, ok: 8, errors: {} });
    expect(report.p50Ms).toBeGreaterThan(0);
    expect(report.p99Ms).toBeGreaterThanOrEqual(report.p50Ms);
  }, 60_000);

  it("Ctrl-C stops the service and leaves no sandbox running", async () => {
    const keep = await sbx(["create", "--wait", "--json"]);
    expect(keep.code, keep.stderr).toBe(0);
    expect(processesUsing(stateDir).length).toBeGreaterThan(0);
    const exited = new Promise<{ code: number | null; signal: string | null }>((r) =>
      service.on("exit", (code, signal) => r({ code, signal })),
    );
    process.kill(-service.pid!, "SIGINT");
    const { code, signal } = await exited;
    // npm itself dies by the SIGINT (as in a terminal); the service under it shuts down cleanly
    expect(code === 0 || signal === "SIGINT", `exit ${code} signal ${signal}`).toBe(true);
    await waitFor(() => serviceOut.includes("sbx: stopped"), 60_000);
    expect(serviceOut, serviceOut.slice(-3000)).toContain("sbx: stopped; every sandbox of this service is closed");
    // exited children linger until their parent or init reaps them: seconds on a loaded machine
    await waitFor(() => processesUsing(stateDir).length === 0, 60_000);
    expect(processesUsing(stateDir)).toEqual([]);
  }, 180_000);
});
