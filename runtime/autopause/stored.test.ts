// A stored policy the strict parser refuses takes only its own sandbox out of automatic
// pause/wake, and is logged once, not every tick.
import { expect, it } from "vitest";
import { createLogger } from "../core/log.ts";
import type { Sandbox } from "../core/types.ts";
import { StoredPolicies } from "./stored.ts";

function sandbox(id: string, autoPause?: unknown): Sandbox {
  return {
    id,
    owner: "alice",
    profile: "python",
    size: "nano",
    phase: "Running",
    ready: true,
    createdAt: "2026-01-01T00:00:00Z",
    expiresAt: "2026-01-02T00:00:00Z",
    metadata: {},
    cpuRequestMillis: 100,
    memoryRequestBytes: 1 << 28,
    ...(autoPause === undefined ? {} : { autoPause: autoPause as Sandbox["autoPause"] }),
  };
}

it("skips and logs (once) a stored document the parser refuses, keeping every other sandbox's policy", () => {
  const lines: string[] = [];
  const stored = new StoredPolicies(
    createLogger({ pretty: false, destination: { write: (l: string) => void lines.push(l) } }),
  );
  const good = { pause: { afterInactivity: "15m" } };
  // accepted before the parser became strict: an unknown key and a lookahead
  const bad = { pause: { afterInactivity: "15m", bogus: 1 } };
  const badRegex = {
    probes: [{ name: "A", command: ["true"] }],
    pause: { whenProbedIdle: { probe: "A", messageRegex: "^(?=idle)", thresholdDuration: 0 } },
  };
  const all = [
    sandbox("sb-1", good),
    sandbox("sb-2", bad),
    sandbox("sb-3"),
    sandbox("sb-4", badRegex),
    sandbox("sb-5", good),
  ];

  for (let tick = 0; tick < 3; tick++) {
    const out = stored.of(all);
    expect(out.map((t) => t.sandbox.id)).toEqual(["sb-1", "sb-5"]);
    expect(out[0].policy.inactivityMs).toBe(900_000);
  }
  const warnings = lines.map((l) => JSON.parse(l)).filter((l) => l.op === "autopause");
  expect(warnings.map((w) => w.sandbox)).toEqual(["sb-2", "sb-4"]);
  expect(warnings[0].err.message).toContain("sandbox sb-2 autoPause.pause.bogus: invalid value 1: unknown field");
  expect(warnings[1].err.message).toContain("RE2 says: invalid or unsupported Perl syntax");

  // gone, then back with the same bad document: logged again
  stored.of([sandbox("sb-1", good)]);
  stored.of(all);
  expect(lines.map((l) => JSON.parse(l)).filter((l) => l.op === "autopause")).toHaveLength(4);
});
