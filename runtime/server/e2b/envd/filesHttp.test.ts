// downloadFile's first decision (bytes, or the command's end?) under the orderings a backend can
// produce. On the Kubernetes channel stdout ends before the exit code arrives; a Readable emits
// 'readable' at its end too, so a refusal (missing file, exit 93) must not be taken for data.
// The session is a fake: what is under test is the ordering, which a real sandbox cannot pin.
import { PassThrough } from "node:stream";
import type { FastifyReply } from "fastify";
import { describe, expect, it } from "vitest";
import { silentLogger } from "../../../core/log.ts";
import type { ExecResult, ExecSession, Manager } from "../../../core/types.ts";
import type { EnvdServices } from "./context.ts";
import { downloadFile, firstOutcome } from "./filesHttp.ts";
import { EXIT } from "./sandboxCommand.ts";

interface FakeSession extends ExecSession {
  stdout: PassThrough;
  stderr: PassThrough;
  exit(code: number): void;
}

function fakeSession(): FakeSession {
  let exit!: (r: ExecResult) => void;
  const result = new Promise<ExecResult>((resolve) => (exit = resolve));
  return {
    stdout: new PassThrough(),
    stderr: new PassThrough(),
    result,
    kill: () => undefined,
    exit: (exitCode) => exit({ exitCode, timedOut: false, oomKilled: false, durationMs: 1 }),
  };
}

/** Lets every pending stream event and promise callback run. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

function services(session: ExecSession): EnvdServices {
  const manager = { exec: async () => session } as unknown as Manager;
  return { manager, logger: silentLogger() } as unknown as EnvdServices;
}

/** Records what downloadFile sends; enough of a FastifyReply for that. */
function fakeReply() {
  const sent: { body?: unknown } = {};
  const reply = {
    raw: new PassThrough(),
    type: () => reply,
    header: () => reply,
    send: (body: unknown) => {
      sent.body = body;
      return reply;
    },
  };
  return { reply: reply as unknown as FastifyReply, sent };
}

const caller = { owner: "alice", sandboxId: "sbx-a" };

describe("envd GET /files: bytes or the end, whichever comes first", () => {
  it("stdout ends empty before the exit code of a missing file: 404, not a stream cut with a 500", async () => {
    const session = fakeSession();
    const { reply, sent } = fakeReply();
    const download = downloadFile(services(session), caller, { path: "/tmp/gone.txt" }, reply);
    download.catch(() => undefined); // awaited below
    await settle(); // the command started and downloadFile listens
    session.stdout.end();
    session.stderr.end();
    await settle();
    session.exit(EXIT.missing);
    await expect(download).rejects.toMatchObject({ code: "not_found", message: expect.stringContaining("gone.txt") });
    expect(sent.body).toBeUndefined();
  });

  it("a device's refusal after an empty stdout is the 400 naming the path", async () => {
    const session = fakeSession();
    const download = downloadFile(services(session), caller, { path: "/dev/zero" }, fakeReply().reply);
    download.catch(() => undefined);
    await settle();
    session.stdout.end();
    await settle();
    session.exit(EXIT.notFile);
    await expect(download).rejects.toMatchObject({
      code: "validation",
      message: expect.stringContaining("/dev/zero"),
    });
  });

  it.each([
    { order: "bytes, then the exit code", bytesFirst: true },
    { order: "the exit code, then bytes", bytesFirst: false },
  ])("a file's bytes are sent ($order)", async ({ bytesFirst }) => {
    const session = fakeSession();
    const { reply, sent } = fakeReply();
    const download = downloadFile(services(session), caller, { path: "/workspace/a.txt" }, reply);
    await settle();
    if (bytesFirst) session.stdout.end("hello");
    else session.exit(0);
    await settle();
    if (bytesFirst) session.exit(0);
    else session.stdout.end("hello");
    await download;
    expect(sent.body).toBe(session.stdout);
    const chunks: Buffer[] = [];
    for await (const c of session.stdout) chunks.push(c as Buffer);
    expect(Buffer.concat(chunks).toString()).toBe("hello");
  });

  it("an empty file: stdout ends, then exit 0: an empty body", async () => {
    const session = fakeSession();
    const { reply, sent } = fakeReply();
    const download = downloadFile(services(session), caller, { path: "/workspace/empty" }, reply);
    await settle();
    session.stdout.end();
    await settle();
    session.exit(0);
    await download;
    expect(sent.body).toBe(session.stdout);
  });

  it("firstOutcome waits past an empty 'readable' for the result", async () => {
    const session = fakeSession();
    let outcome: string | undefined;
    void firstOutcome(session).then((o) => (outcome = o));
    session.stdout.end();
    await settle();
    expect(outcome).toBeUndefined();
    session.exit(EXIT.missing);
    await settle();
    expect(outcome).toBe("end");
  });
});
