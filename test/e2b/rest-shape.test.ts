// The pure half of the E2B REST layer (runtime/server/e2b/shape.ts): the list query as the SDK
// encodes it, state mapping, the timeout end, and cursor paging (every sandbox exactly once, in
// order, whatever the page size, even when sandboxes are added between pages).
import { describe, expect, it } from "vitest";
import type { Sandbox, SandboxPhase } from "../../runtime/core/types.ts";
import {
  e2bState,
  endAtMs,
  pageOf,
  parseMetadataFilter,
  parseStates,
  RESERVED,
  resolveListFilter,
  toE2b,
} from "../../runtime/server/e2b/shape.ts";

function sandbox(id: string, createdAt: string, over: Partial<Sandbox> = {}): Sandbox {
  return {
    id,
    owner: "alice",
    profile: "base",
    size: "nano",
    phase: "Running",
    ready: true,
    createdAt,
    expiresAt: "2026-01-02T00:00:00.000Z",
    metadata: {},
    cpuRequestMillis: 100,
    memoryRequestBytes: 256 * 2 ** 20,
    ...over,
  };
}

/** the SDK's encoding (src/sandbox/sandboxApi.ts), then the URL's own decoding, as fastify does */
function asSdkSends(metadata: Record<string, string>): string {
  const pairs = Object.fromEntries(
    Object.entries(metadata).map(([k, v]) => [encodeURIComponent(k), encodeURIComponent(v)]),
  );
  const query = new URLSearchParams({ metadata: new URLSearchParams(pairs).toString() }).toString();
  return new URLSearchParams(query).get("metadata") as string;
}

describe("list query", () => {
  it.each([[{ run: "abc" }], [{ a: "1", b: "two words", "c.d": "x=y&z" }], [{ unicode: "ünï ☃", pct: "100%" }]])(
    "metadata %j survives the SDK's double encoding",
    (m) => {
      expect(parseMetadataFilter(asSdkSends(m))).toEqual(m);
    },
  );

  it.each<[string | undefined, string[]]>([
    [undefined, ["running", "paused"]],
    ["", ["running", "paused"]],
    ["running", ["running"]],
    ["running,paused", ["running", "paused"]],
  ])("state %j", (raw, want) => expect([...parseStates(raw)]).toEqual(want));

  it.each([
    [{ state: "sleeping" }, 'state: invalid value "sleeping"'],
    [{ startedAfter: "soon" }, 'startedAfter: invalid value "soon"'],
    [{ nextToken: "zz" }, 'nextToken: invalid value "zz"'],
    [{ metadata: "k=%E0%A4%A" }, "metadata: invalid value"],
  ])("refuses %j", (q, message) => expect(() => resolveListFilter(q)).toThrow(message));
});

describe("state and end", () => {
  it.each<[SandboxPhase, string | undefined]>([
    ["Pending", "running"],
    ["Running", "running"],
    ["Resuming", "running"],
    ["Pausing", "paused"],
    ["Paused", "paused"],
    ["Terminating", undefined],
    ["Failed", undefined],
    ["Succeeded", undefined],
  ])("%s is %s", (phase, want) => expect(e2bState(phase)).toBe(want));

  it("the end: the one in metadata, else the hard TTL, never past the hard TTL", () => {
    const at = (end: string) => sandbox("a", "2026-01-01T00:00:00.000Z", { metadata: { [RESERVED.end]: end } });
    const s = at("2026-01-01T00:05:00.000Z");
    expect(endAtMs(s)).toBe(Date.parse("2026-01-01T00:05:00.000Z"));
    expect(endAtMs(at("2027-01-01T00:00:00.000Z"))).toBe(Date.parse(s.expiresAt));
    expect(endAtMs(at("not a time"))).toBe(Date.parse(s.expiresAt));
    expect(endAtMs(sandbox("b", s.createdAt))).toBe(Date.parse(s.expiresAt));
  });

  it("shows user metadata only", () => {
    const s = sandbox("a", "2026-01-01T00:00:00.000Z", {
      // the port relay's exposures hold a token's hash too (runtime/server/ports/metadataAccess.ts)
      metadata: { job: "1", [RESERVED.tokenHash]: "f".repeat(64), "sbx.ports.8080": '{"public":true}' },
    });
    expect(toE2b(s, undefined).metadata).toEqual({ job: "1" });
  });
});

describe("paging", () => {
  const all = Array.from({ length: 23 }, (_, i) =>
    sandbox(`s${String(i).padStart(2, "0")}`, `2026-01-01T00:00:${String(i % 7).padStart(2, "0")}.000Z`),
  );

  it.each([1, 2, 5, 22, 23, 100])(
    "limit %i yields every sandbox once, in (createdAt, id) order, both ways",
    (limit) => {
      for (const order of ["asc", "desc"] as const) {
        const seen: string[] = [];
        let nextToken: string | undefined;
        do {
          const page = pageOf(all, resolveListFilter({ limit, order, nextToken }));
          expect(page.items.length).toBeLessThanOrEqual(limit);
          seen.push(...page.items.map((s) => s.id));
          nextToken = page.nextToken;
          // a cursor that does not advance must fail here, not loop forever
          expect(seen.length).toBeLessThanOrEqual(all.length);
        } while (nextToken);
        const sorted = [...all].sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
        expect(seen).toEqual((order === "asc" ? sorted : sorted.reverse()).map((s) => s.id));
      }
    },
  );

  it("a sandbox created between pages does not shift the cursor", () => {
    const first = pageOf(all, resolveListFilter({ limit: 5 }));
    const more = [sandbox("s-new", "2026-01-01T00:00:00.000Z"), ...all];
    const second = pageOf(more, resolveListFilter({ limit: 5, nextToken: first.nextToken }));
    expect(second.items.map((s) => s.id)).not.toContain(first.items.at(-1)?.id);
    expect(second.items[0].createdAt >= (first.items.at(-1)?.createdAt ?? "")).toBe(true);
  });
});
