// Tunnels over the command channel against the real helper binary and daemon, run locally: the
// daemon's loopback is this machine's here (in a pod it is the pod's), so the servers below
// listen on 127.0.0.1 or ::1 in this process. test/k8s/ports/ covers the cluster path.
import { createHash, randomBytes } from "node:crypto";
import net from "node:net";
import { type Duplex, PassThrough } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ManualClock, systemClock } from "../../core/clock.ts";
import type { CommandChannel } from "./channel.ts";
import type { ChannelSession } from "./command.ts";
import { type LocalHelper, startLocalHelper } from "./testFixtures.ts";
import { connectTunnel, type TunnelStream } from "./tunnel.ts";

let helper: LocalHelper;
let n = 0;
const id = () => `tun-${process.pid}-${++n}`;

beforeAll(async () => {
  helper = await startLocalHelper("sbx-tun-");
});
afterAll(() => helper.close());

async function open(ch: CommandChannel, port: number, tunnelId = id()): Promise<TunnelStream> {
  const input = new PassThrough();
  return connectTunnel(ch.tunnel(tunnelId, port, input), input, { sandboxId: "sb-test", port }, systemClock);
}

async function listen(handler: (s: net.Socket) => void, host = "127.0.0.1"): Promise<net.Server> {
  const server = net.createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return server;
}
const portOf = (s: net.Server) => (s.address() as net.AddressInfo).port;

/**
 * A server on ::1 at a port that nothing holds on 127.0.0.1 (the daemon tries that first, and
 * this machine runs other servers on loopback): checked by binding it there once, then letting go.
 */
async function listenV6Only(handler: (s: net.Socket) => void): Promise<net.Server> {
  for (;;) {
    const server = await listen(handler, "::1");
    const probe = net.createServer();
    const free = await new Promise<boolean>((resolve) => {
      probe.once("error", () => resolve(false));
      probe.listen(portOf(server), "127.0.0.1", () => resolve(true));
    });
    if (free) {
      await new Promise((r) => probe.close(r));
      return server;
    }
    server.close();
  }
}

async function readAll(s: Duplex): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of s) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");

describe("tunnels over the command channel (local daemon)", () => {
  it("carries a request and its answer, and half-closes: the server reads its end and still answers", async () => {
    // answers only once it read the client's end: without the daemon's SHUT_WR it never would
    const server = await listen((s) => {
      const got: Buffer[] = [];
      s.on("data", (c) => got.push(c));
      s.on("end", () => s.end(`got ${Buffer.concat(got).toString()}`));
    });
    const ch = await helper.openChannel("local", systemClock);
    const t = await open(ch, portOf(server));
    t.end("hello");
    expect((await readAll(t)).toString()).toBe("got hello");
    ch.close();
    server.close();
  });

  it("moves 16 MiB each way at once with the right bytes (credit both ways)", async () => {
    const server = await listen((s) => s.pipe(s)); // echo, with its own backpressure
    const ch = await helper.openChannel("local", systemClock);
    const t = await open(ch, portOf(server));
    const payload = randomBytes(16 << 20);
    const back = readAll(t);
    t.end(payload);
    expect(sha(await back)).toBe(sha(payload));
    ch.close();
    server.close();
  });

  it("holds a reader that stops: the server blocks, and every byte comes once it reads again", async () => {
    let sent = 0;
    const total = 64 << 20;
    const server = await listen((s) => {
      const chunk = Buffer.alloc(1 << 16, 7);
      const more = () => {
        while (sent < total) {
          sent += chunk.length;
          if (!s.write(chunk)) return void s.once("drain", more);
        }
        s.end();
      };
      more();
    });
    const ch = await helper.openChannel("local", systemClock);
    const t = await open(ch, portOf(server));
    t.pause();
    await new Promise((r) => setTimeout(r, 500));
    const held = sent;
    expect(held).toBeLessThan(32 << 20);
    await new Promise((r) => setTimeout(r, 300));
    expect(sent).toBe(held); // blocked, not slow
    expect((await readAll(t)).length).toBe(total);
    ch.close();
    server.close();
  });

  it("reports a refused connect as the stream's error and confirmListening's, retryable, before any byte", async () => {
    const server = await listen(() => undefined);
    const port = portOf(server);
    await new Promise((r) => server.close(r));
    const ch = await helper.openChannel("local", systemClock);
    const refusal = {
      code: "upstream",
      details: { port, refused: true },
      message: expect.stringContaining(`nothing accepted a connection on port ${port}`),
    };
    // the request's bytes went out with the open; the daemon drops them with the refusal
    const t = await open(ch, port);
    t.write("GET / HTTP/1.1\r\n\r\n");
    const seen = await new Promise<{ err?: Error; bytes: number }>((resolve) => {
      let bytes = 0;
      t.on("data", (c: Buffer) => (bytes += c.length));
      t.on("error", (err) => resolve({ err, bytes }));
      t.on("end", () => resolve({ bytes }));
    });
    expect(seen.bytes).toBe(0);
    expect(seen.err).toMatchObject(refusal);
    const again = await open(ch, port);
    again.on("error", () => undefined);
    await expect(again.confirmListening()).rejects.toMatchObject(refusal);
    // the channel goes on: the refusal was one stream's
    const s = ch.start({ id: id(), argv: ["true"], env: {}, cwd: "/" });
    expect(await s.result).toMatchObject({ exitCode: 0 });
    ch.close();
  });

  it("reaches a server bound to ::1 only", async () => {
    const server = await listenV6Only((s) => s.end("six"));
    const ch = await helper.openChannel("local", systemClock);
    const t = await open(ch, portOf(server));
    t.end();
    expect((await readAll(t)).toString()).toBe("six");
    ch.close();
    server.close();
  });

  it("closes the server's socket when the caller destroys the tunnel, and when the channel dies", async () => {
    const closed: string[] = [];
    const got: string[] = [];
    const server = await listen((s) => {
      s.once("data", (c) => {
        got.push(c.toString());
        s.on("close", () => closed.push(c.toString()));
      });
      s.on("error", () => undefined);
    });
    const ch = await helper.openChannel("local", systemClock);
    const a = await open(ch, portOf(server));
    const b = await open(ch, portOf(server));
    b.on("error", () => undefined); // the channel's break reaches it as an error
    a.write("a");
    b.write("b");
    await until(() => got.length === 2);
    a.destroy();
    await until(() => closed.includes("a"));
    expect(closed).toEqual(["a"]);
    ch.close();
    await until(() => closed.includes("b"));
    server.close();
  });

  it("ends the tunnel when the server closes; a tunnel is not a command to list or attach", async () => {
    const server = await listen((s) => s.once("data", () => s.end("bye")));
    const ch = await helper.openChannel("local", systemClock);
    const t = await open(ch, portOf(server), "tunnel-not-a-command");
    expect((await ch.list()).map((c) => c.id)).not.toContain("tunnel-not-a-command");
    await expect(ch.attach("tunnel-not-a-command").result).rejects.toThrow(/no such command/);
    t.write("x");
    expect((await readAll(t)).toString()).toBe("bye");
    await until(() => t.destroyed); // the exit frame came: the tunnel is over both ways
    ch.close();
    server.close();
  });

  it("carries 50 tunnels at once on one channel, each with its own answer", async () => {
    const server = await listen((s) => s.once("data", (c) => s.end(`echo ${c.toString()}`)));
    const ch = await helper.openChannel("local", systemClock);
    const answers = await Promise.all(
      Array.from({ length: 50 }, async (_, i) => {
        const t = await open(ch, portOf(server));
        t.write(String(i));
        return (await readAll(t)).toString();
      }),
    );
    expect(answers).toEqual(Array.from({ length: 50 }, (_, i) => `echo ${i}`));
    ch.close();
    server.close();
  });

  it("gives up on a connect that takes too long, on the injected clock", async () => {
    const clock = new ManualClock();
    const input = new PassThrough();
    // a session whose connect never answers: a stream the daemon never hears of
    const silent = {
      pid: new Promise<number>(() => undefined),
      result: new Promise(() => undefined),
      stdout: new PassThrough(),
      stderr: new PassThrough(),
      kill: () => undefined,
    } as unknown as ChannelSession;
    const pending = connectTunnel(silent, input, { sandboxId: "sb-test", port: 9 }, clock, 1_000);
    pending.on("error", () => undefined);
    const refused = expect(pending.confirmListening()).rejects.toMatchObject({ details: { port: 9, refused: false } });
    await clock.advance(1_000);
    await refused;
  });

  it("stops its connect timer without building a DOMException (once per relayed request)", async () => {
    const signals: AbortSignal[] = [];
    const clock = {
      now: () => new Date(),
      sleep: (ms: number, s?: AbortSignal) => {
        if (s) signals.push(s);
        return systemClock.sleep(ms, s);
      },
    };
    const connected = {
      pid: Promise.resolve(42),
      result: new Promise(() => undefined),
      stdout: new PassThrough(),
      stderr: new PassThrough(),
      kill: () => undefined,
    } as unknown as ChannelSession;
    const t = connectTunnel(connected, new PassThrough(), { sandboxId: "sb-test", port: 9 }, clock);
    await t.confirmListening();
    expect(signals).toHaveLength(1);
    expect(signals[0].aborted).toBe(true);
    // abort() without a reason makes a DOMException with its stack trace: costly on the hot path
    expect(signals[0].reason).not.toBeInstanceOf(DOMException);
    t.destroy();
  });
});

describe("a reader that pauses with more than a MiB buffered", () => {
  it("gets the rest of a command's output once it reads again (the credit is granted after the read)", async () => {
    const ch = await helper.openChannel("local", systemClock);
    const s = ch.start({ id: id(), argv: ["sh", "-c", "head -c 16777216 /dev/zero"], env: {}, cwd: "/" });
    s.stdout.pause();
    await new Promise((r) => setTimeout(r, 500));
    let got = 0;
    s.stdout.on("data", (c: Buffer) => (got += c.length));
    s.stdout.resume();
    expect(await s.result).toMatchObject({ exitCode: 0 });
    expect(got).toBe(16 << 20);
    ch.close();
  });
});

async function until(ok: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !ok(); i++) await new Promise((r) => setTimeout(r, 10));
  expect(ok()).toBe(true);
}
