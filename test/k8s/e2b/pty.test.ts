// E2B's pty API with the real, unmodified SDK on the Kubernetes platform (issue 32, item 2):
// the service as `npm start` wires it, pods on the suite's control plane, the terminal opened by
// the pod's helper daemon. pty.create runs the SDK's `bash -i -l` on /dev/pts/N, input echoes, a
// resize reaches `stty size`, kill ends it, and a pty outlives the request that started it:
// pty.connect by pid after that request ended sees output typed later. The same assertions as
// the local platform's test/e2b/envd-pty.test.ts: one scenario for both, in test/support/e2bPty.ts.
import type { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, it } from "vitest";
import { ptyCreateResizeKill, ptyReconnect } from "../../support/e2bPty.ts";
import { type E2bOnService, startE2bSandbox } from "../runtime/service-support.ts";

let e: E2bOnService;
let sbx: Sandbox;

beforeAll(async () => {
  e = await startE2bSandbox("e2b-pty");
  ({ sbx } = e);
}, 240_000);

afterAll(async () => {
  await e?.close();
});

describe("sandbox.pty (Kubernetes platform)", () => {
  it("create runs bash -i on /dev/pts/N; input echoes; resize changes stty size; kill ends it", async () => {
    await ptyCreateResizeKill(sbx);
  });

  it("outlives the request that started it: connect by pid after it ended shows new output", async () => {
    await ptyReconnect(sbx);
  });
});
