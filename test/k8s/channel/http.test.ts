// A broken command channel as an HTTP caller sees it: a 503 with Retry-After and the error code
// `unavailable` (retry: the next call opens a new channel), never a 502. An upload over the
// channel (transfers on) is a call whose answer waits for the command, so the break under it is
// the response itself.
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { systemClock } from "../../../runtime/core/clock.ts";
import type { KubeClients } from "../../../runtime/k8s/client.ts";
import { podRunner } from "../../../runtime/k8s/podExec.ts";
import type { KubernetesBackend } from "../../../runtime/kubernetes.ts";
import type { Service } from "../../../runtime/server/service.ts";
import { waitFor } from "../../support/cluster.ts";
import { TOKENS } from "../../support/local.ts";
import { startTestService, type TestService } from "../runtime/service-support.ts";
import type { TestNamespaces } from "../runtime/support.ts";

let t: TestService;
let clients: KubeClients;
let ns: TestNamespaces;
let backend: KubernetesBackend;
let service: Service;
const alice = { authorization: `Bearer ${TOKENS.alice}` };

beforeAll(async () => {
  t = await startTestService("rt-ch503", {}, { commandChannel: { transfers: true } });
  ({ clients, ns, backend, service } = t);
}, 120_000);

afterAll(async () => {
  await t?.close();
});

it("answers a call whose channel broke under it with 503, Retry-After and code unavailable", async () => {
  const created = await fetch(`${service.url}/v1/sandboxes`, {
    method: "POST",
    headers: { ...alice, "content-type": "application/json" },
    body: JSON.stringify({ size: "nano" }),
  });
  expect(created.status).toBeLessThan(300);
  const { id } = (await created.json()) as { id: string };
  await backend.awaitReady(id, { timeoutMs: 60_000 });
  const opened = await backend.exec(id, { command: ["true"] });
  opened.stdout.resume();
  opened.stderr.resume();
  await opened.result;
  const channel = t.platform.testing.channels.pool.current(id)!;
  const { channelPid } = await channel.hello;

  // the start of a real archive: tar in the sandbox waits for the rest while the channel breaks
  const dir = mkdtempSync(join(tmpdir(), "sbx-ch503-"));
  writeFileSync(join(dir, "f.bin"), Buffer.alloc(512 << 10, 7));
  const tar = spawnSync("tar", ["-C", dir, "-cf", "-", "f.bin"], { maxBuffer: 8 << 20 }).stdout;
  let body!: ReadableStreamDefaultController<Uint8Array>;
  const upload = fetch(`${service.url}/v1/sandboxes/${id}/files?path=/tmp/in`, {
    method: "PUT",
    headers: { ...alice, "content-type": "application/x-tar" },
    body: new ReadableStream<Uint8Array>({
      start(c) {
        body = c;
      },
    }),
    duplex: "half",
  } as RequestInit);
  body.enqueue(tar.subarray(0, 65536));
  await waitFor("the upload's tar to run over the channel", async () => (await channel.list()).length > 1);
  // kill the channel's process over a plain exec (the websocket path); the pod is named after its sandbox
  const kill = await podRunner(clients.kc, ns.sandboxes, systemClock)(id, ["kill", "-9", String(channelPid)]);
  kill.stdout.resume();
  kill.stderr.resume();
  expect((await kill.result).exitCode).toBe(0);
  await waitFor("the replica to see the channel break", async () => channel.closed);
  body.close(); // only now: an archive cut short before the break would be tar's own failure (502)

  const res = await upload;
  const answer = (await res.json()) as { error: { code: string; message: string; details: Record<string, unknown> } };
  expect(res.status, JSON.stringify(answer)).toBe(503);
  expect(res.headers.get("retry-after")).toBe("1");
  expect(answer.error).toMatchObject({ code: "unavailable", details: { retryable: true, retryAfterSeconds: 1 } });
  expect(answer.error.message).toContain("retry the call");

  // and the retry it asks for works, over a new channel
  const again = await fetch(`${service.url}/v1/sandboxes/${id}/files?path=/tmp/in`, {
    method: "PUT",
    headers: { ...alice, "content-type": "application/x-tar" },
    body: tar,
  });
  expect(again.status, await again.text()).toBeLessThan(300);
  expect(t.platform.testing.channels.pool.current(id)).not.toBe(channel);
});
