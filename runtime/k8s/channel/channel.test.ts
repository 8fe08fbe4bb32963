// The command channel's protocol against the real helper binary and daemon, run locally (the
// same code runs in a pod; test/k8s/channel/ covers the cluster path).
import { PassThrough, type Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { systemClock } from "../../core/clock.ts";
import { CommandChannel } from "./channel.ts";
import { CREDIT_STEP, OUTPUT_WINDOW, WINDOW } from "./frames.ts";
import { localChannelTransport } from "./localTransport.ts";
import { type LocalHelper, startLocalHelper } from "./testFixtures.ts";

let local: LocalHelper;

async function text(s: Readable): Promise<string> {
  let out = "";
  for await (const c of s) out += c.toString();
  return out;
}

const openChannel = (): Promise<CommandChannel> => local.openChannel("local", systemClock);

let n = 0;
const id = () => `test-${process.pid}-${++n}`;

beforeAll(async () => {
  local = await startLocalHelper("sbx-ch-");
});

afterAll(() => local?.close());

describe("command channel (local daemon)", () => {
  it("runs a command with env, cwd, stdin and its exit code", async () => {
    const ch = await openChannel();
    const s = ch.start({
      id: id(),
      argv: ["sh", "-c", 'cat; echo "$GREETING in $(pwd)"; echo oops >&2; exit 3'],
      env: { GREETING: "hi" },
      cwd: "/tmp",
      stdin: Buffer.from("from stdin\n"),
    });
    const [out, err, r] = await Promise.all([text(s.stdout), text(s.stderr), s.result]);
    expect(out).toBe("from stdin\nhi in /tmp\n");
    expect(err).toBe("oops\n");
    expect(r).toMatchObject({ exitCode: 3, timedOut: false, oomKilled: false });
    ch.close();
  });

  it("reports a missing program as 127 and a missing cwd as 126, with the reason on stderr", async () => {
    const ch = await openChannel();
    const a = ch.start({ id: id(), argv: ["no-such-program-xyz"], env: {}, cwd: "/" });
    const b = ch.start({ id: id(), argv: ["true"], env: {}, cwd: "/no/such/dir" });
    expect(await a.result).toMatchObject({ exitCode: 127 });
    expect(await text(a.stderr)).toContain("no-such-program-xyz");
    expect(await b.result).toMatchObject({ exitCode: 126 });
    ch.close();
  });

  it("takes stdin far past the window, even as one chunk, against the daemon's credit", async () => {
    const ch = await openChannel();
    // a reader that starts late: what is not in its pipe yet waits here, not in the daemon
    const s = ch.start({
      id: id(),
      argv: ["sh", "-c", "sleep 1; wc -c"],
      env: {},
      cwd: "/",
      stdin: Buffer.alloc(8 << 20, 1),
    });
    expect((await text(s.stdout)).trim()).toBe(String(8 << 20));
    expect(await s.result).toMatchObject({ exitCode: 0 });
    ch.close();
  });

  it("starts commands with every signal at its default, though the daemon ignores SIGHUP and SIGPIPE", async () => {
    const ch = await openChannel();
    const hup = ch.start({ id: id(), argv: ["sh", "-c", "kill -HUP $$; sleep 5"], env: {}, cwd: "/" });
    expect(await hup.result).toMatchObject({ exitCode: 129, oomKilled: false });
    // the call's env wins over the daemon's, and the marker is the command's own id
    const cmdId = id();
    const env = ch.start({
      id: cmdId,
      argv: ["sh", "-c", 'echo "$HOME $SBX_EXEC_ID"'],
      env: { HOME: "/call" },
      cwd: "/",
    });
    expect(await text(env.stdout)).toBe(`/call ${cmdId}\n`);
    ch.close();
  });

  it("times out with 124 and kills with 137, the whole group", async () => {
    const ch = await openChannel();
    const t = ch.start({ id: id(), argv: ["sh", "-c", "sleep 30 & sleep 31"], env: {}, cwd: "/", timeoutMs: 300 });
    const k = ch.start({ id: id(), argv: ["sh", "-c", "echo up; sleep 32"], env: {}, cwd: "/" });
    k.stdout.once("data", () => k.kill());
    expect(await t.result).toMatchObject({ exitCode: 124, timedOut: true, oomKilled: false });
    expect(await k.result).toMatchObject({ exitCode: 137, timedOut: false, oomKilled: false });
    ch.close();
  });

  it("keeps commands when the channel dies; a new channel lists and re-attaches them, replaying the output", async () => {
    const first = await openChannel();
    const cmdId = id();
    const s = first.start({ id: cmdId, argv: ["sh", "-c", "echo one; sleep 30; echo two"], env: {}, cwd: "/" });
    await new Promise((r) => s.stdout.once("data", r));
    first.close();
    await expect(s.result).rejects.toMatchObject({
      code: "unavailable",
      retryAfterSeconds: 1,
      details: { retryable: true, retryAfterSeconds: 1 },
    });

    const second = await openChannel();
    expect(await second.list()).toEqual(
      expect.arrayContaining([expect.objectContaining({ id: cmdId, state: "running" })]),
    );
    const again = second.attach(cmdId);
    const out = text(again.stdout);
    expect(await again.pid).toBeGreaterThan(0);
    again.kill();
    expect(await out).toBe("one\n");
    expect(await again.result).toMatchObject({ exitCode: 137 });
    second.close();
  });

  it("a re-attached reader writes the command's stdin, which the broken channel left open", async () => {
    const first = await openChannel();
    const cmdId = id();
    const input = new PassThrough();
    const s = first.start({
      id: cmdId,
      argv: ["sh", "-c", "read a; echo got-$a; read b; echo got-$b"],
      env: {},
      cwd: "/",
      stdin: input,
    });
    input.write("one\n");
    await new Promise((r) => s.stdout.once("data", r));
    first.close();
    await expect(s.result).rejects.toMatchObject({ code: "unavailable" });
    const second = await openChannel();
    const again = second.attach(cmdId, { stdin: Buffer.from("two\n") });
    expect(await text(again.stdout)).toBe("got-one\ngot-two\n");
    expect(await again.result).toMatchObject({ exitCode: 0 });
    second.close();
  });

  it("200 concurrent commands over one channel each get their own output and exit code", async () => {
    const ch = await openChannel();
    const runs = Array.from({ length: 200 }, (_, i) => {
      const s = ch.start({
        id: id(),
        argv: ["sh", "-c", `echo out-${i}; echo err-${i} >&2; exit ${i % 7}`],
        env: {},
        cwd: "/",
      });
      return Promise.all([text(s.stdout), text(s.stderr), s.result]);
    });
    const results = await Promise.all(runs);
    results.forEach(([out, err, r], i) => {
      expect(out).toBe(`out-${i}\n`);
      expect(err).toBe(`err-${i}\n`);
      expect(r.exitCode).toBe(i % 7);
    });
    ch.close();
  });

  it("a reader that stops holds back only its own command", async () => {
    const ch = await openChannel();
    // 64 MiB of output nobody reads, next to a small command that must still finish
    const big = ch.start({ id: id(), argv: ["sh", "-c", "head -c 67108864 /dev/zero"], env: {}, cwd: "/" });
    big.stdout.pause();
    const small = ch.start({ id: id(), argv: ["echo", "still here"], env: {}, cwd: "/" });
    expect(await text(small.stdout)).toBe("still here\n");
    // What the daemon may send unasked (the output window) plus what a reader buffers before
    // credit stops: the window comes in full even though the reader paused at once (4 MiB the
    // daemon opens with, the rest granted with the start), and then no more
    await waitForLength(big.stdout, OUTPUT_WINDOW);
    expect(big.stdout.readableLength).toBeLessThanOrEqual(OUTPUT_WINDOW + (1 << 20) + CREDIT_STEP);
    let total = 0;
    big.stdout.on("data", (c: Buffer) => (total += c.length));
    big.stdout.resume();
    expect(await big.result).toMatchObject({ exitCode: 0 });
    expect(total).toBe(64 << 20);
    ch.close();
  });

  it("grants the output window with the start, then credit in CREDIT_STEP steps", async () => {
    await openChannel(); // the fixture learns the daemon this test's own channel shares
    const inner = localChannelTransport(local.binary, local.dir);
    const credits: { stream: number; bytes: number }[] = [];
    const ch = new CommandChannel(
      {
        ...inner,
        output: inner.output,
        send: (b) => {
          if (b[0] === "C".charCodeAt(0)) credits.push({ stream: b.readUInt32BE(1), bytes: b.readUInt32BE(9) });
          inner.send(b);
        },
      },
      "local",
      systemClock,
    );
    await ch.hello;
    const total = 32 << 20;
    const s = ch.start({ id: id(), argv: ["head", "-c", String(total), "/dev/zero"], env: {}, cwd: "/" });
    let got = 0;
    s.stdout.on("data", (c: Buffer) => (got += c.length));
    s.stderr.resume();
    expect(await s.result).toMatchObject({ exitCode: 0 });
    expect(got).toBe(total);
    const [first, ...grants] = credits.filter((c) => c.stream === credits[0].stream);
    expect(first.bytes).toBe(OUTPUT_WINDOW - WINDOW);
    // each grant is a message through the API server and the kubelet: a step each, not a frame each
    expect(grants.every((g) => g.bytes >= CREDIT_STEP)).toBe(true);
    expect(grants.length).toBeLessThanOrEqual(total / CREDIT_STEP);
    ch.close();
  });
});

/** resolves once `s` buffers `n` bytes; a generous bound: the machine is shared */
async function waitForLength(s: Readable, n: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (s.readableLength < n) {
    if (Date.now() > deadline) throw new Error(`the stream buffered ${s.readableLength} bytes, never ${n}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
