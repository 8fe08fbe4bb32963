// The OOM verdict on an injected clock: a broken channel whose container status says OOMKilled
// (now or within the grace) is 137 + oomKilled; a container still running after the grace, a
// pod that cannot be read, another reason, or an error that is not a broken channel stay as
// they were. test/k8s/channel/channel.test.ts covers it against the cluster.
import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { ManualClock } from "../../core/clock.ts";
import { TimeoutError } from "../../core/errors.ts";
import type { ChannelSession } from "./command.ts";
import { ChannelBrokenError } from "./errors.ts";
import { type ReadContainerEnd, withOomVerdict } from "./oom.ts";

function brokenSession(err: Error): ChannelSession {
  const result = Promise.reject(err);
  result.catch(() => undefined);
  return {
    stdout: new PassThrough(),
    stderr: new PassThrough(),
    result,
    pid: Promise.resolve(1),
    commandId: "cmd-1",
    kill: () => undefined,
  };
}

/** the container's status as a list of answers, one per read; the last one repeats */
function statusSequence(answers: (Awaited<ReturnType<ReadContainerEnd>> | Error)[]) {
  let reads = 0;
  const read: ReadContainerEnd = async () => {
    const a = answers[Math.min(reads++, answers.length - 1)];
    if (a instanceof Error) throw a;
    return a;
  };
  return { read, reads: () => reads };
}

const broken = () => new ChannelBrokenError("pod-1", "the exec stream ended");
const settle = async (clock: ManualClock, steps: number) => {
  for (let i = 0; i < steps; i++) await clock.advance(250);
};

describe("withOomVerdict", () => {
  it("answers 137 + oomKilled when the status says OOMKilled at once", async () => {
    const clock = new ManualClock();
    const s = statusSequence([{ reason: "OOMKilled", exitCode: 137 }]);
    const r = await withOomVerdict(brokenSession(broken()), { readEnd: s.read, clock }).result;
    expect(r).toMatchObject({ exitCode: 137, timedOut: false, oomKilled: true });
  });

  it("waits for a status that comes a moment after the break", async () => {
    const clock = new ManualClock();
    const s = statusSequence([undefined, undefined, undefined, { reason: "OOMKilled" }]);
    const result = withOomVerdict(brokenSession(broken()), { readEnd: s.read, clock }).result;
    await settle(clock, 4);
    expect(await result).toMatchObject({ exitCode: 137, oomKilled: true });
    expect(s.reads()).toBe(4);
  });

  it.each([
    ["a container still running after the grace", [undefined], 9],
    ["a container that ended for another reason", [{ reason: "Error", exitCode: 1 }], 1],
    ["a pod that cannot be read", [new Error("pods not found")], 1],
  ])("keeps the retryable break for %s", async (_what, answers, reads) => {
    const clock = new ManualClock();
    const s = statusSequence(answers);
    const result = withOomVerdict(brokenSession(broken()), { readEnd: s.read, clock }).result;
    await settle(clock, 10);
    await expect(result).rejects.toMatchObject({ code: "unavailable", details: { retryable: true } });
    expect(s.reads()).toBe(reads);
  });

  it("does not look at the pod for an error that is not a broken channel", async () => {
    const s = statusSequence([{ reason: "OOMKilled" }]);
    const result = withOomVerdict(brokenSession(new TimeoutError("slow")), {
      readEnd: s.read,
      clock: new ManualClock(),
    }).result;
    await expect(result).rejects.toMatchObject({ code: "timeout" });
    expect(s.reads()).toBe(0);
  });
});
