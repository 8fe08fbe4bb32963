import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { discardClaimedPod } from "./pause.ts";

/** A real client of an API server that is not there: every call fails with a connection error. */
function unreachableCore(): CoreV1Api {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "gone", server: "http://127.0.0.1:9", skipTLSVerify: true }],
    users: [{ name: "u", token: "t" }],
    contexts: [{ name: "c", cluster: "gone", user: "u" }],
    currentContext: "c",
  });
  return kc.makeApiClient(CoreV1Api);
}

describe("discardClaimedPod", () => {
  it("does not reject when the delete fails, and logs it with the sandbox and the pod", async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: "info" }, { write: (l: string) => void lines.push(JSON.parse(l)) });
    await expect(
      discardClaimedPod(
        { core: unreachableCore(), namespace: "sbx-sandboxes", logger },
        "sbx-claim1",
        "warm-base-nano-x1",
        "resume",
      ),
    ).resolves.toBeUndefined();
    expect(lines).toEqual([
      expect.objectContaining({
        level: 40,
        sandbox: "sbx-claim1",
        pod: "warm-base-nano-x1",
        op: "resume",
        err: expect.any(String),
        msg: expect.stringContaining("the reconciler removes it later"),
      }),
    ]);
  });
});
