// The create path in front of a fenced share: a create that finds the replica fenced by a late
// renewal waits for the scope's renewal before admitting (admitted when it lands, 429
// replica_fenced when it does not), and each wait is counted on /metrics by outcome. A create
// on an unfenced replica never asks. The scope is a stub the test drives; nothing sleeps.
import { describe, expect, it } from "vitest";
import { validateRuntimeConfig } from "../config/schema.ts";
import type { ActivityTouches } from "./activity.ts";
import { Admission, type AdmissionScope } from "./admission.ts";
import { AdmissionFollower } from "./admissionFollow.ts";
import type { ImageCatalog } from "./catalog.ts";
import { ManualClock } from "./clock.ts";
import { CreatePath } from "./createPath.ts";
import { CapacityError } from "./errors.ts";
import { silentLogger } from "./log.ts";
import { Metrics } from "./metrics.ts";
import type { Backend, Sandbox, SandboxSpec } from "./types.ts";

const BUDGET = { cpuMillis: 1_000, memoryBytes: 10 * 2 ** 30 };

function setup() {
  const share = { fenced: false, asked: 0, renewal: undefined as undefined | ((ok: boolean) => void) };
  const scope: AdmissionScope = {
    limit: () => (share.fenced ? { cpuMillis: 0, memoryBytes: 0 } : BUDGET),
    counts: () => true,
    fenced: () => share.fenced,
    awaitRenewal: () => {
      share.asked++;
      return new Promise<boolean>((resolve) => {
        share.renewal = (ok) => {
          if (ok) share.fenced = false;
          resolve(ok);
        };
      });
    },
  };
  const admission = new Admission(BUDGET, { scope });
  const metrics = new Metrics({ admission: () => admission.usage(), sandboxes: () => [] }, { defaultMetrics: false });
  const backend = {
    claim: async () => undefined,
    provision: async (spec: SandboxSpec) => ({ id: spec.id, owner: spec.owner, phase: "Pending" }) as Sandbox,
    describe: async () => undefined,
  } as unknown as Backend;
  const logger = silentLogger();
  const path = new CreatePath({
    backend,
    sandboxes: backend,
    config: validateRuntimeConfig({}),
    catalog: { resolve: (profile: string) => ({ profile, image: "host" }) } as unknown as ImageCatalog,
    clock: new ManualClock(),
    logger,
    admission,
    follower: new AdmissionFollower({ admission, logger }),
    activity: { created: () => undefined } as unknown as ActivityTouches,
    metrics,
    canPause: false,
    audit: () => undefined,
  });
  const create = () =>
    path.create({ owner: "alice", profile: "base", size: "nano" }).then(
      (sb) => ({ ok: sb.id }),
      (err: unknown) => ({ err }),
    );
  const waits = async (outcome: string) => {
    const line = (await metrics.registry.metrics())
      .split("\n")
      .find((l) => l.startsWith(`sbx_admission_renewal_wait_seconds_count{outcome="${outcome}"}`));
    return line ? Number(line.split(" ").pop()) : 0;
  };
  return { share, create, waits, admission };
}

const flush = async () => {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
};

describe("a create on a replica fenced by a late renewal", () => {
  it("waits for the renewal, then is admitted, and the wait is counted", async () => {
    const { share, create, waits, admission } = setup();
    share.fenced = true;
    const c = create();
    await flush();
    expect(share.asked).toBe(1);
    expect(admission.usage().reservations).toBe(0); // nothing admitted while it waits
    share.renewal?.(true);
    expect(await c).toMatchObject({ ok: expect.any(String) });
    expect(admission.usage().reservations).toBe(1);
    expect(await waits("renewed")).toBe(1);
    expect(await waits("fenced")).toBe(0);
  });

  it("answers 429 replica_fenced when the renewal does not land in time, and counts that", async () => {
    const { share, create, waits } = setup();
    share.fenced = true;
    const c = create();
    await flush();
    share.renewal?.(false);
    const out = (await c) as { err: CapacityError };
    expect(out.err).toBeInstanceOf(CapacityError);
    expect(out.err.details).toMatchObject({ reason: "replica_fenced" });
    expect(out.err.retryAfterSeconds).toBeGreaterThan(0);
    expect(await waits("fenced")).toBe(1);
  });

  it("does not ask when the replica is not fenced", async () => {
    const { share, create, waits } = setup();
    expect(await create()).toMatchObject({ ok: expect.any(String) });
    expect(share.asked).toBe(0);
    expect(await waits("renewed")).toBe(0);
  });
});
