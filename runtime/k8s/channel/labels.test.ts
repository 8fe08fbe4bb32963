// A start's label (StartCommand.label) against the real helper daemon, run locally: kept with the
// command and listed while it runs, never in the command's environment; starts without one list
// as before. And across versions: the daemon from before labels (built from the sources of
// BEFORE_LABELS, the last commit without them) still runs a labelled start, and a replica reads
// its four-field list.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { systemClock } from "../../core/clock.ts";
import { CommandChannel } from "./channel.ts";
import { LABEL_MAX } from "./frames.ts";
import { localChannelTransport } from "./localTransport.ts";
import { type LocalHelper, startLocalHelper } from "./testFixtures.ts";

/** the last commit whose daemon knows no labels (what pods started before this change run) */
const BEFORE_LABELS = "ea94481d27af0431e038fe689fa966f4cf0092f2";

let local: LocalHelper;
let n = 0;
const id = () => `label-${process.pid}-${++n}`;

async function text(s: Readable): Promise<string> {
  let out = "";
  for await (const c of s) out += c.toString();
  return out;
}

beforeAll(async () => {
  local = await startLocalHelper("sbx-label-");
});

afterAll(() => local?.close());

describe("command labels (local daemon)", () => {
  it("lists a running command's label, keeps it out of its environment, and drops it once it exited", async () => {
    const ch = await local.openChannel("local", systemClock);
    const label = Buffer.from(JSON.stringify({ cmd: "sleepy", envs: { K: "v" } })).toString("base64url");
    const cmdId = id();
    const s = ch.start({ id: cmdId, argv: ["env"], env: { A: "1" }, cwd: "/", label, stdin: undefined });
    const plain = ch.start({ id: id(), argv: ["sleep", "30"], env: {}, cwd: "/" });
    const env = await text(s.stdout);
    expect(env).toContain("A=1\n");
    expect(env).not.toContain("sbx-label");
    await s.result;
    const running = ch.start({ id: id(), argv: ["sleep", "30"], env: {}, cwd: "/", label });
    await running.pid;
    const listed = await ch.list();
    expect(listed.find((c) => c.id === running.commandId)).toMatchObject({ state: "running", label });
    expect(listed.find((c) => c.id === cmdId)).toMatchObject({ state: "exited", exit: "exit:0" });
    expect(listed.find((c) => c.id === cmdId)).not.toHaveProperty("label");
    expect(listed.find((c) => c.id === plain.commandId)).not.toHaveProperty("label");
    running.kill();
    plain.kill();
    await Promise.all([running.result, plain.result]);
    ch.close();
  });

  it("refuses a label the daemon could not keep, before anything is sent", async () => {
    const ch = await local.openChannel("local", systemClock);
    expect(() => ch.start({ id: id(), argv: ["true"], env: {}, cwd: "/", label: "a\tb" })).toThrow(/base64url/);
    expect(() => ch.start({ id: id(), argv: ["true"], env: {}, cwd: "/", label: "a".repeat(LABEL_MAX + 1) })).toThrow(
      /at most 8192/,
    );
    const ok = ch.start({ id: id(), argv: ["true"], env: {}, cwd: "/", label: "a".repeat(LABEL_MAX) });
    expect(await ok.result).toMatchObject({ exitCode: 0 });
    ch.close();
  });
});

describe("a daemon from before labels", () => {
  let root: string;
  let binary: string;
  const daemons: number[] = [];

  beforeAll(() => {
    // that commit's helper sources, built as scripts/build-local-helper.sh builds them
    root = mkdtempSync(join(tmpdir(), "sbx-label-old-"));
    const files = ["sbx-helper.c", "seccomp.c", "seccomp.h", "port-relay.c", "port-relay.h", "channel.c"];
    files.push("channel.h", "daemon.c", "registry.c", "registry.h", "ring.c");
    for (const f of files) {
      let src: Buffer;
      try {
        src = execFileSync("git", ["show", `${BEFORE_LABELS}:tools/local-helper/${f}`], {
          cwd: process.cwd(),
          stdio: ["ignore", "pipe", "pipe"],
        });
      } catch (err) {
        throw new Error(
          `this test builds the helper daemon of commit ${BEFORE_LABELS} from git history and could not read ${f} (${(err as Error).message.split("\n")[0]}); run it in a git clone of the repository with its full history (git fetch --unshallow)`,
        );
      }
      execFileSync("sh", ["-c", 'cat > "$1"', "sh", join(root, f)], { input: src });
    }
    binary = join(root, "sbx-helper");
    const sources = files.filter((f) => f.endsWith(".c")).map((f) => join(root, f));
    execFileSync("gcc", ["-O2", "-static", "-Wno-unused-result", "-o", binary, ...sources]);
  }, 120_000);

  afterAll(() => {
    for (const pid of daemons) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone already
      }
    }
    if (root) rmSync(root, { recursive: true, force: true });
  });

  it("runs a labelled start (the label lands in its environment) and lists without labels", async () => {
    const ch = new CommandChannel(localChannelTransport(binary, join(root, "h")), "old", systemClock);
    daemons.push((await ch.hello).daemonPid);
    const s = ch.start({ id: id(), argv: ["sh", "-c", "echo ran; sleep 30"], env: {}, cwd: "/", label: "bGFiZWw" });
    const first = await new Promise<string>((resolve) => s.stdout.once("data", (c: Buffer) => resolve(c.toString())));
    expect(first).toBe("ran\n");
    const listed = await ch.list();
    expect(listed.find((c) => c.id === s.commandId)).toEqual({ id: s.commandId, pid: await s.pid, state: "running" });
    s.kill();
    s.stdout.resume();
    expect(await s.result).toMatchObject({ exitCode: 137 });
    ch.close();
  });
});
