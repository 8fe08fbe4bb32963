import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { buildExecArgv, classifyExit, exitCodeFromStatus, timeoutSeconds, validateWrapperExec } from "./execCommand.ts";

const ID = "0123456789abcdef01234567";

describe("validateWrapperExec", () => {
  it.each([
    [{ command: ["A=B"] }, {}, "command[0]"],
    [
      { command: ["ls"], env: { SBX_EXEC_ID: "mine" } },
      {},
      'env.SBX_EXEC_ID: invalid value "SBX_EXEC_ID": SBX_EXEC_ID is set by the runtime',
    ],
    [{ command: ["ls"] }, { SBX_EXEC_ID: "from the spec" }, "env.SBX_EXEC_ID"],
  ])("refuses %j (sandbox env %j)", (req, baseEnv, msg) => {
    expect(() => validateWrapperExec(req, baseEnv)).toThrow(msg);
  });
  it("accepts what the Manager's check lets through", () => {
    expect(() => validateWrapperExec({ command: ["ls", "A=B"], env: { X: "1" } }, { Y: "2" })).not.toThrow();
  });
});

describe("buildExecArgv", () => {
  it("refuses a malformed exec id", () => {
    expect(() => buildExecArgv({ command: ["ls"] }, {}, "x; rm")).toThrow('execId: invalid value "x; rm"');
  });

  it("defaults cwd to /workspace and has no timeout", () => {
    const argv = buildExecArgv({ command: ["echo", "hi"] }, {}, ID);
    expect(argv.slice(3)).toEqual(["sbx-exec", "/workspace", ID, "0", "echo", "hi"]);
  });

  it("lets request env override the sandbox's env", () => {
    const argv = buildExecArgv({ command: ["env"], env: { A: "2" } }, { A: "1", B: "x" }, ID);
    expect(argv.slice(7)).toEqual(["A=2", "B=x", "env"]);
  });

  // The wrapper is real shell: run it here to prove cwd, env, exit codes and the timeout.
  const dir = mkdtempSync(join(tmpdir(), "sbx-exec-"));
  const run = (argv: string[]) => spawnSync(argv[0], argv.slice(1), { encoding: "utf8" });
  it("runs in cwd with env and passes the exit code through", () => {
    const r = run(
      buildExecArgv(
        { command: ["sh", "-c", 'echo "$PWD $GREETING"; exit 7'], cwd: dir, env: { GREETING: "hello world" } },
        {},
        ID,
      ),
    );
    expect(r.stdout.trim()).toBe(`${dir} hello world`);
    expect(r.status).toBe(7);
  });
  it("marks the command and timeout with the exec id, and nothing else from the wrapper leaks into its env", () => {
    const r = run(
      buildExecArgv(
        {
          command: [
            "sh",
            "-c",
            'echo "$SBX_EXEC_ID"; tr "\\0" "\\n" < /proc/$PPID/environ | grep -c "^SBX_EXEC_ID=$SBX_EXEC_ID$"; echo "${t-unset}"',
          ],
          cwd: dir,
        },
        {},
        ID,
      ),
    );
    expect(r.stdout).toBe(`${ID}\n1\nunset\n`); // $PPID is `timeout`: it carries the marker too
  });
  it("kills the whole process group on timeout", () => {
    const marker = join(dir, "survivor");
    const started = Date.now();
    const r = run(
      buildExecArgv({ command: ["sh", "-c", `(sleep 2; touch ${marker}) & sleep 30`], timeoutMs: 300 }, {}, ID),
    );
    const took = Date.now() - started;
    expect(r.signal ?? r.status).toBeTruthy();
    expect(took).toBeLessThan(20_000); // `sleep 30` would take 30 s; generous for a busy machine
    execFileSync("sleep", ["2.5"]);
    expect(spawnSync("test", ["-e", marker]).status).toBe(1); // the background child died too
  });
  it("exits 126 when cwd does not exist", () => {
    expect(run(buildExecArgv({ command: ["true"], cwd: join(dir, "nope") }, {}, ID)).status).toBe(126);
  });
});

describe("timeoutSeconds / classifyExit / exitCodeFromStatus", () => {
  it.each([
    [undefined, "0"],
    [0, "0"],
    [1500, "1.5"],
    [1, "0.001"],
    [60_000, "60"],
  ])("timeout %s ms -> %s s", (ms, s) => expect(timeoutSeconds(ms)).toBe(s));

  it.each([
    [137, 1000, 1000, false, { exitCode: 124, timedOut: true, oomKilled: false }],
    [137, 200, 1000, false, { exitCode: 137, timedOut: false, oomKilled: true }],
    [137, 200, undefined, true, { exitCode: 137, timedOut: false, oomKilled: false }],
    [0, 5000, 1000, false, { exitCode: 0, timedOut: false, oomKilled: false }],
  ])("exit %s after %s ms (timeout %s, killed %s)", (code, dur, t, killed, want) => {
    expect(classifyExit(code, dur, t, killed)).toEqual(want);
  });

  it.each([
    [{ status: "Success" }, 0],
    [
      { status: "Failure", reason: "NonZeroExitCode", details: { causes: [{ reason: "ExitCode", message: "42" }] } },
      42,
    ],
  ])("status %j -> %s", (s, code) => expect(exitCodeFromStatus(s)).toBe(code));
  it("turns other failures into errors with the server's message", () => {
    expect((exitCodeFromStatus({ status: "Failure", message: "container not found" }) as Error).message).toBe(
      "container not found",
    );
  });
});
