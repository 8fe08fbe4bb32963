// `sbx shell` under a real pseudo-terminal: the real CLI (bin/sbx.mjs) runs in a tmux pane (a
// private tmux server on its own socket) against the real service on a real socket, local
// platform. An interactive python3 in the login shell answers print(6*7), a resize of the pane
// reaches the sandbox's terminal, `exit 3` becomes sbx's exit code, `~.` cuts a session (exit
// 255, nothing left running), and the local terminal's settings (`stty -a`) are the same after
// as before. The EscapeScanner's table is here too.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { PassThrough } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../../runtime/cli/main.ts";
import { EscapeScanner } from "../../runtime/cli/shell.ts";
import { auth, type LocalRuntime, parseExecFrames, startLocalRuntime, TOKENS } from "../support/local.ts";

const repo = resolve(import.meta.dirname, "../..");
let rt: LocalRuntime;
let base = "";
let id: string;
let work: string;
const sock = () => join(work, "tmux.sock");

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "sbx-shell-"));
  rt = await startLocalRuntime({ budget: { cpu: "400m", memory: "4Gi" } });
  base = await rt.app.listen({ host: "127.0.0.1", port: 0 });
  id = (await rt.manager.create({ owner: "alice", profile: "base", size: "nano" })).id;
  await rt.manager.wait("alice", id, { timeoutMs: 60_000 });
}, 120_000);

afterAll(async () => {
  try {
    execFileSync("tmux", ["-S", sock(), "kill-server"], { stdio: "ignore" });
  } catch {
    // no server left: every session ended
  }
  await rt?.close();
  if (work) rmSync(work, { recursive: true, force: true });
});

function tmux(...args: string[]): string {
  return execFileSync("tmux", ["-S", sock(), ...args], {
    encoding: "utf8",
    env: { ...process.env, TERM: "xterm-256color" },
  });
}

/** Polls until `ok()` returns a value; the bound is a safety net far above a normal wait, never the assertion. */
async function until<T>(what: string, ok: () => T | undefined, ms = 60_000): Promise<T> {
  for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 100))) {
    const v = ok();
    if (v !== undefined) return v;
  }
  throw new Error(`${what}: not within ${ms} ms`);
}

const screen = (name: string) => tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", name);
const waitScreen = (name: string, re: RegExp) =>
  until(`${re} in pane ${name}`, () => (re.test(screen(name)) ? true : undefined)).catch((err: Error) => {
    throw new Error(`${err.message}; it shows:\n${screen(name)}`);
  });
/** The local terminal's settings without its size (which the test changes on purpose). */
const settings = (file: string) => readFileSync(file, "utf8").replace(/rows \d+; columns \d+;/, "");

/**
 * Starts `sbx shell ...` in a new pane of its own size; around it the pane records `stty -a`
 * before and after, and sbx's exit code.
 */
function startShell(name: string, args: string): void {
  const dir = join(work, name);
  const script = [
    `stty -a > ${dir}.before`,
    `SBX_SERVER=${base} SBX_TOKEN=${TOKENS.alice} ${process.execPath} ${join(repo, "bin/sbx.mjs")} shell ${id} ${args}`,
    `echo $? > ${dir}.code`,
    `stty -a > ${dir}.after`,
    "sleep 600",
  ].join("\n");
  writeFileSync(`${dir}.sh`, script);
  tmux("-f", "/dev/null", "new-session", "-d", "-s", name, "-x", "100", "-y", "30", `sh ${dir}.sh`);
  // a detached session takes the size it is given, not its (absent) client's
  tmux("set-option", "-t", name, "window-size", "manual");
}

const codeOf = (name: string) =>
  until(`sbx's exit code in ${name}`, () => {
    try {
      const c = readFileSync(join(work, `${name}.code`), "utf8").trim();
      return c === "" ? undefined : Number(c);
    } catch {
      return undefined;
    }
  });

async function sandboxRuns(pattern: string): Promise<number> {
  const res = await rt.app.inject({
    method: "POST",
    url: `/v1/sandboxes/${id}/exec`,
    headers: auth("alice"),
    payload: { command: ["sh", "-c", `cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -c '${pattern}' || true`] },
  });
  return Number(parseExecFrames(res.body).stdout.trim());
}

describe("sbx shell under a real terminal", () => {
  it("runs an interactive python3 in the login shell, follows a resize, passes exit 3 through, restores the terminal", async () => {
    startShell("py", "");
    await waitScreen("py", /\$ $|# $/m);
    tmux("send-keys", "-t", "py", "stty size; python3", "Enter");
    await waitScreen("py", /^30 100\s*$/m);
    await waitScreen("py", />>> $/m);
    tmux("send-keys", "-t", "py", "print(6*7)", "Enter");
    await waitScreen("py", /^42\s*$/m);
    tmux("resize-window", "-t", "py", "-x", "120", "-y", "40");
    tmux("send-keys", "-t", "py", "import os; print('size', os.get_terminal_size())", "Enter");
    await waitScreen("py", /size os\.terminal_size\(columns=120, lines=40\)/);
    tmux("send-keys", "-t", "py", "exit()", "Enter");
    tmux("send-keys", "-t", "py", "exit 3", "Enter");
    expect(await codeOf("py")).toBe(3);
    await until("stty -a after", () => {
      try {
        return readFileSync(join(work, "py.after"), "utf8") || undefined;
      } catch {
        return undefined;
      }
    });
    expect(settings(join(work, "py.after"))).toBe(settings(join(work, "py.before")));
    // raw mode really was on while the shell ran: the pane's own echo was off (no doubled input)
    expect(screen("py").match(/print\(6\*7\)/g)?.length).toBe(1);
  }, 180_000);

  it("~. at the start of a line cuts the session: exit 255, terminal restored, nothing left running", async () => {
    startShell("esc", "-- sh -c 'echo ready-for-escape; exec sleep 6060'");
    await waitScreen("esc", /ready-for-escape/);
    expect(await sandboxRuns("sleep 606[0]")).toBe(1);
    tmux("send-keys", "-t", "esc", "Enter");
    tmux("send-keys", "-t", "esc", "-l", "~.");
    expect(await codeOf("esc")).toBe(255);
    await waitScreen("esc", /connection closed \(~\.\)/);
    await until("stty -a after", () => {
      try {
        return readFileSync(join(work, "esc.after"), "utf8") || undefined;
      } catch {
        return undefined;
      }
    });
    expect(settings(join(work, "esc.after"))).toBe(settings(join(work, "esc.before")));
    for (let i = 0; i < 300 && (await sandboxRuns("sleep 606[0]")) !== 0; i++)
      await new Promise((r) => setTimeout(r, 100));
    expect(await sandboxRuns("sleep 606[0]")).toBe(0);
  }, 180_000);
});

/** runCli's streams with a stdin that says it is a terminal and records its raw-mode switches. */
function fakeTerminal() {
  const stdin = Object.assign(new PassThrough(), {
    isTTY: true,
    modes: [] as boolean[],
    setRawMode(on: boolean) {
      stdin.modes.push(on);
      return stdin;
    },
  });
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = "";
  let err = "";
  stdout.on("data", (c) => (out += c));
  stderr.on("data", (c) => (err += c));
  return { io: { stdin, stdout, stderr }, out: () => out, err: () => err };
}

describe("sbx shell in-process: the terminal's mode is put back on every way out", () => {
  const env = () => ({ SBX_SERVER: base, SBX_TOKEN: TOKENS.alice });

  it("after the command exits (its code passed through)", async () => {
    const t = fakeTerminal();
    const code = await runCli(["shell", id, "--", "sh", "-c", "echo in-term; exit 3"], { env: env(), io: t.io });
    expect(code).toBe(3);
    expect(t.out()).toContain("in-term");
    expect(t.io.stdin.modes).toEqual([true, false]);
  });

  it("after the connection closes under it (the sandbox killed)", async () => {
    const other = (await rt.manager.create({ owner: "alice", profile: "base", size: "nano" })).id;
    await rt.manager.wait("alice", other, { timeoutMs: 60_000 });
    const t = fakeTerminal();
    const running = runCli(["shell", other, "--", "sh", "-c", "echo up; exec sleep 600"], { env: env(), io: t.io });
    await until("the shell's output", () => (t.out().includes("up") ? true : undefined));
    await rt.manager.kill("alice", other);
    const code = await running;
    expect(code).not.toBe(0);
    expect(t.io.stdin.modes).toEqual([true, false]);
  }, 120_000);

  it("a refusal (another owner's sandbox) never touches the terminal", async () => {
    const t = fakeTerminal();
    const code = await runCli(["shell", id], { env: { SBX_SERVER: base, SBX_TOKEN: TOKENS.bob }, io: t.io });
    expect(code).toBe(4);
    expect(t.err()).toContain("not found");
    expect(t.io.stdin.modes).toEqual([]);
  });
});

describe("the ~. escape", () => {
  it.each([
    ["~.", "", true],
    ["ls\r~.", "ls\r", true],
    ["ls\n~.", "ls\n", true],
    ["a~.", "a~.", false],
    ["\r~~", "\r~", false],
    ["\r~x", "\r~x", false],
    ["\r~~.", "\r~.", false],
  ])("%j forwards %j (quit: %s)", (typed, forwarded, quit) => {
    const r = new EscapeScanner().scan(Buffer.from(typed));
    expect(r.forward.toString()).toBe(forwarded);
    expect(r.quit).toBe(quit);
  });

  it("holds a ~ across chunks", () => {
    const s = new EscapeScanner();
    expect(s.scan(Buffer.from("x\r~")).forward.toString()).toBe("x\r");
    const r = s.scan(Buffer.from("."));
    expect(r.quit).toBe(true);
  });
});
