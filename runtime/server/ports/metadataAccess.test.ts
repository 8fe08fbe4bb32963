import { describe, expect, it } from "vitest";
import { parseStoredAccess } from "./metadataAccess.ts";

const HASH = "a".repeat(64);
const AT = "2026-12-01T00:00:00.000Z";

describe("parseStoredAccess", () => {
  it.each([
    ["public", `{"public":true,"exposedAt":"${AT}"}`, { owner: "alice", public: true, exposedAt: AT }],
    [
      "per-port token",
      `{"public":false,"tokenSha256":"${HASH}","exposedAt":"${AT}"}`,
      { owner: "alice", public: false, tokenSha256: HASH, exposedAt: AT },
    ],
    // the owner is the sandbox's, whatever a value claims
    [
      "a claimed owner",
      `{"public":true,"owner":"mallory","exposedAt":"${AT}"}`,
      { owner: "alice", public: true, exposedAt: AT },
    ],
    // a public exposure carries no hash, even one written with it
    [
      "public with a hash",
      `{"public":true,"tokenSha256":"${HASH}","exposedAt":"${AT}"}`,
      { owner: "alice", public: true, exposedAt: AT },
    ],
  ])("%s", (_name, value, want) => {
    expect(parseStoredAccess("alice", value)).toEqual(want);
  });

  it.each([
    ["absent", undefined],
    ["not JSON", "public"],
    ["JSON null", "null"],
    ["no public flag", `{"exposedAt":"${AT}"}`],
    ["public as a string", `{"public":"true","exposedAt":"${AT}"}`],
    ["no exposedAt", `{"public":true}`],
    ["token without a hash", `{"public":false,"exposedAt":"${AT}"}`],
    ["a hash that is no sha256", `{"public":false,"tokenSha256":"abc","exposedAt":"${AT}"}`],
    ["an upper-case hash", `{"public":false,"tokenSha256":"${HASH.toUpperCase()}","exposedAt":"${AT}"}`],
  ])("opens nothing for %s", (_name, value) => {
    expect(parseStoredAccess("alice", value)).toBeUndefined();
  });
});
