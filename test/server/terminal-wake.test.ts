// A terminal on a paused sandbox wakes it, as exec does (issue 32 item 3): `sbx shell` through the
// real service on a real socket, local platform with a real registry for the snapshot. The
// sandbox's file, written before the pause, is there in the woken sandbox's terminal.
import { PassThrough } from "node:stream";
import { afterAll, beforeAll, expect, it } from "vitest";
import { runCli } from "../../runtime/cli/main.ts";
import { auth, type LocalRuntime, parseExecFrames, startLocalRuntime, TOKENS } from "../support/local.ts";
import { startRegistry, type TestRegistry } from "../support/registry.ts";

let registry: TestRegistry;
let rt: LocalRuntime;
let url: string;

beforeAll(async () => {
  registry = await startRegistry();
  rt = await startLocalRuntime({ budget: { cpu: "200m", memory: "4Gi" }, snapshots: { registry: registry.url } });
  url = await rt.app.listen({ host: "127.0.0.1", port: 0 });
}, 120_000);

afterAll(async () => {
  await rt?.close();
  await registry?.stop();
});

it("sbx shell on a paused sandbox wakes it and runs in it", async () => {
  const id = (await rt.manager.create({ owner: "alice", profile: "base", size: "nano" })).id;
  await rt.manager.wait("alice", id, { timeoutMs: 60_000 });
  const wrote = await rt.app.inject({
    method: "POST",
    url: `/v1/sandboxes/${id}/exec`,
    headers: auth("alice"),
    payload: { command: ["sh", "-c", "echo before-the-pause > /workspace/marker"] },
  });
  expect(parseExecFrames(wrote.body).exit?.exitCode).toBe(0);
  await rt.manager.pause("alice", id);
  expect((await rt.manager.get("alice", id)).phase).toBe("Paused");

  const stdout = new PassThrough();
  let out = "";
  stdout.on("data", (c) => (out += c));
  const code = await runCli(["shell", id, "--", "sh", "-c", "cat /workspace/marker; tty; exit 7"], {
    env: { SBX_SERVER: url, SBX_TOKEN: TOKENS.alice },
    io: { stdin: new PassThrough(), stdout, stderr: new PassThrough() },
  });
  expect(code).toBe(7);
  expect(out).toContain("before-the-pause");
  expect(out).toMatch(/\/dev\/pts\/\d+/);
  expect((await rt.manager.get("alice", id)).phase).toBe("Running");
}, 180_000);
