// Large output through the E2B command stream, with the real SDK on the local platform: 64 MB
// through commands.run and through onStdout while CPU-bound processes run beside the service,
// and a reader that stops reading, which must hold back only its own command (not the owner's
// other commands, not another owner's) and get the whole output once it reads again.
// The stall these guard against (issue 32): a feed paused above its high mark was resumed only
// by a read that took it from above the mark to below half of it in one step, so a reader that
// fell behind (as it does when the machine is busy) waited forever for output that was paused.
import { createHash } from "node:crypto";
import { type IncomingMessage, request } from "node:http";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { withBusyProcesses } from "../../bench/lib/busy.ts";
import { type LocalRuntime, startLocalRuntime, TOKENS } from "../support/local.ts";

const MB = 1024 * 1024;
const SIZE = 64 * MB;
/** a line the output repeats: the expected bytes are known without running the command */
const LINE = "0123456789abcdef\n";
const COMMAND = `yes ${LINE.trim()} | head -c ${SIZE}`;
const EXPECTED_SHA = createHash("sha256").update(Buffer.alloc(SIZE, LINE)).digest("hex");
/** CPU-bound processes beside the service while a contended test runs (the four) */
const BUSY = 4;
/** a command that gets this long on a busy 2-core machine has stalled (it takes seconds) */
const RUN_MS = 150_000;

let rt: LocalRuntime;
let url: string;
let alice: Sandbox;
let bob: Sandbox;

beforeAll(async () => {
  rt = await startLocalRuntime({ budget: { cpu: "8", memory: "16Gi" } });
  url = await rt.app.listen({ host: "127.0.0.1", port: 0 });
  const opts = { apiUrl: url, sandboxUrl: url, timeoutMs: 600_000 };
  [alice, bob] = await Promise.all([
    Sandbox.create("base", { ...opts, apiKey: TOKENS.alice }),
    Sandbox.create("base", { ...opts, apiKey: TOKENS.bob }),
  ]);
}, 120_000);

afterAll(async () => {
  rt?.app.server.closeAllConnections(); // a reader the slow-consumer test left must not hold close()
  await Promise.all([alice?.kill().catch(() => undefined), bob?.kill().catch(() => undefined)]);
  await rt?.close();
});

/** the busy processes outlive any run that has not stalled; the load must last the whole run */
const contended = <T>(fn: () => Promise<T>) => withBusyProcesses(BUSY, 300, fn);

const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

describe("64 MB through the E2B command stream under CPU contention", () => {
  it(
    "commands.run returns all of it",
    async () => {
      const r = await contended(() => alice.commands.run(COMMAND, { timeoutMs: RUN_MS }));
      expect(r.exitCode).toBe(0);
      expect(r.stdout.length).toBe(SIZE);
      expect(sha256(r.stdout)).toBe(EXPECTED_SHA);
    },
    RUN_MS + 30_000,
  );

  it(
    "onStdout sees all of it, in order, before the command ends",
    async () => {
      const hash = createHash("sha256");
      let bytes = 0;
      const r = await contended(() =>
        alice.commands.run(COMMAND, {
          timeoutMs: RUN_MS,
          onStdout: (d) => {
            hash.update(d);
            bytes += d.length;
          },
        }),
      );
      expect(r.exitCode).toBe(0);
      expect(bytes).toBe(SIZE);
      expect(hash.digest("hex")).toBe(EXPECTED_SHA);
    },
    RUN_MS + 30_000,
  );
});

interface RawStart {
  /** resolves once the start event arrived (the command runs); from then on nothing is read */
  started: Promise<void>;
  /** reads the rest: stdout bytes and the end event's exit code; what it has after withinMs if the end has not come */
  readAll(withinMs: number): Promise<{ bytes: number; exitCode?: number }>;
  destroy(): void;
}

/**
 * envd's Start over node:http with the SDK's framing (Connect, JSON): a reader that can stop
 * reading at the socket, which the SDK's client cannot be made to do.
 */
function rawStart(sandbox: Sandbox, cmd: string): RawStart {
  const head = Buffer.alloc(5);
  const body = Buffer.from(JSON.stringify({ process: { cmd: "/bin/bash", args: ["-l", "-c", cmd] } }));
  head.writeUInt32BE(body.length, 1);
  const req = request(`${url}/process.Process/Start`, {
    method: "POST",
    headers: {
      "content-type": "application/connect+json",
      "connect-protocol-version": "1",
      "e2b-sandbox-id": sandbox.sandboxId,
      // the SDK holds it in a protected field
      "x-access-token": (sandbox as unknown as { envdAccessToken: string }).envdAccessToken,
    },
  });
  let buf = Buffer.alloc(0);
  let bytes = 0;
  let exitCode: number | undefined;
  const take = (chunk: Buffer) => {
    buf = Buffer.concat([buf, chunk]);
    while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
      const len = buf.readUInt32BE(1);
      const ev = JSON.parse(buf.subarray(5, 5 + len).toString()).event ?? {};
      buf = buf.subarray(5 + len);
      if (ev.data?.stdout) bytes += Buffer.from(ev.data.stdout, "base64").length;
      if (ev.end) exitCode = ev.end.exitCode ?? 0;
    }
  };
  const response = new Promise<IncomingMessage>((resolve, reject) => {
    req.on("error", reject); // and, after destroy(), nothing: the promise has settled
    req.once("response", resolve);
  });
  req.end(Buffer.concat([head, body]));
  const started = response.then(
    (res) =>
      new Promise<void>((resolve, reject) => {
        if (res.statusCode !== 200) reject(new Error(`Start answered ${res.statusCode}`));
        res.on("error", () => undefined); // destroyed at the end of the test
        // the start event comes first, before any output: take the first chunk, then stop
        res.once("data", (c: Buffer) => {
          res.pause();
          take(c);
          resolve();
        });
      }),
  );
  return {
    started,
    readAll: async (withinMs) => {
      const res = await response;
      let timer: NodeJS.Timeout | undefined;
      const ended = new Promise<void>((resolve, reject) => {
        res.once("end", resolve);
        res.once("error", reject);
        // a stalled stream shows as the bytes it got, not as a test timeout
        timer = setTimeout(resolve, withinMs);
      });
      res.on("data", take);
      res.resume();
      await ended.finally(() => clearTimeout(timer));
      return { bytes, exitCode };
    },
    destroy: () => req.destroy(),
  };
}

describe("a reader that stops reading", () => {
  it("holds back only its own command, and gets all of it once it reads again", async () => {
    const marker = `/workspace/slow-${Date.now()}`;
    const slow = rawStart(alice, `${COMMAND}; touch ${marker}`);
    try {
      await slow.started;
      // while it reads nothing, the owner's other commands and another owner's run to their end
      const [mine, theirs] = await Promise.all([
        alice.commands.run(`head -c ${8 * MB} /dev/zero | wc -c`, { timeoutMs: RUN_MS }),
        bob.commands.run(`head -c ${8 * MB} /dev/zero`, { timeoutMs: RUN_MS }),
      ]);
      expect(mine.stdout.trim()).toBe(String(8 * MB));
      expect(theirs.stdout.length).toBe(8 * MB);
      // ...and the unread command is held back by its reader, not finished: 64 MB cannot all
      // sit in socket and feed buffers, so its output is paused
      expect(await alice.files.exists(marker)).toBe(false);
      // reading again resumes it to its end: the pause lifts however the reader drains it
      const got = await slow.readAll(90_000);
      expect(got).toEqual({ bytes: SIZE, exitCode: 0 });
      expect(await alice.files.exists(marker)).toBe(true);
    } finally {
      slow.destroy();
    }
  }, 240_000);
});
