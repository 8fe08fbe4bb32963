// E2B's pty API with the real, unmodified SDK on the Kubernetes platform (issue 32, item 2):
// the service as `npm start` wires it, pods on the suite's control plane, the terminal opened by
// the pod's helper daemon. pty.create runs the SDK's `bash -i -l` on /dev/pts/N, input echoes, a
// resize reaches `stty size`, kill ends it, and a pty outlives the request that started it:
// pty.connect by pid after that request ended sees output typed later. The same assertions as
// the local platform's test/e2b/envd-pty.test.ts: one scenario for both, in test/support/e2bPty.ts.
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, it } from "vitest";
import type { Service } from "../../../runtime/server/service.ts";
import { ptyCreateResizeKill, ptyReconnect } from "../../support/e2bPty.ts";
import { TOKENS } from "../../support/local.ts";
import { startTestService, type TestService } from "../runtime/service-support.ts";
import type { TestNamespaces } from "../runtime/support.ts";

let t: TestService;
let ns: TestNamespaces;
let service: Service;
let sbx: Sandbox;

beforeAll(async () => {
  t = await startTestService("e2b-pty");
  ({ ns, service } = t);
  sbx = await Sandbox.create("base", {
    apiKey: TOKENS.alice,
    apiUrl: service.url,
    sandboxUrl: service.url,
    requestTimeoutMs: 150_000,
    timeoutMs: 600_000,
  });
}, 240_000);

afterAll(async () => {
  await sbx?.kill().catch(() => undefined);
  await service?.close();
  await ns?.cleanup();
});

describe("sandbox.pty (Kubernetes platform)", () => {
  it("create runs bash -i on /dev/pts/N; input echoes; resize changes stty size; kill ends it", async () => {
    await ptyCreateResizeKill(sbx);
  });

  it("outlives the request that started it: connect by pid after it ended shows new output", async () => {
    await ptyReconnect(sbx);
  });
});
