import { describe, expect, it } from "vitest";
import { validateRuntimeConfig } from "../config/schema.ts";
import { ValidationError } from "./errors.ts";
import { isSandboxId, resolveSpec, sandboxId } from "./spec.ts";
import type { CreateRequest } from "./types.ts";

const cfg = validateRuntimeConfig({});
const catalog = (p: string) => {
  if (p !== "base") throw new ValidationError("profile", p, "unknown profile; use one of: base");
  return { profile: p, image: "host" };
};
const now = new Date(Date.UTC(2026, 0, 1));
const ok: CreateRequest = { owner: "alice", profile: "base", size: "nano" };

describe("resolveSpec", () => {
  it("fills defaults from config", () => {
    const s = resolveSpec({ owner: "alice" } as CreateRequest, cfg, catalog, now);
    expect(s.size.name).toBe("nano");
    expect(s.image).toEqual({ profile: "base", image: "host" });
    expect(s.ttlSeconds).toBe(3600);
    expect(s.idleTimeoutSeconds).toBe(900);
    expect(isSandboxId(s.id)).toBe(true);
  });

  it.each([
    { req: { owner: "" }, err: 'owner: invalid value ""' },
    { req: { profile: "gpu" }, err: 'profile: invalid value "gpu": unknown profile; use one of: base' },
    {
      req: { size: "huge" },
      err: 'size: invalid value "huge": unknown size class; use one of: nano, small, medium, large',
    },
    { req: { size: "constructor" }, err: "size: invalid value" },
    { req: { ttlSeconds: 0 }, err: "ttlSeconds: invalid value 0: must be a whole number of seconds from 1 to 86400" },
    { req: { ttlSeconds: 86401 }, err: "ttlSeconds: invalid value 86401" },
    { req: { ttlSeconds: 1.5 }, err: "ttlSeconds: invalid value 1.5" },
    { req: { idleTimeoutSeconds: -1 }, err: "idleTimeoutSeconds: invalid value -1" },
    { req: { env: { "1BAD": "x" } }, err: 'env.1BAD: invalid value "1BAD"' },
    { req: { env: { GOOD: 3 } }, err: "env.GOOD: invalid value 3: must be a string" },
    { req: { env: [] }, err: "env: invalid value []: must be an object" },
    {
      req: { env: { A: "x".repeat(70000) } },
      err: 'env: invalid value "70003 bytes": total size must be at most 65536 bytes',
    },
    { req: { metadata: { "bad key": "x" } }, err: "metadata.bad key: invalid value" },
    { req: { metadata: { k: "x".repeat(300) } }, err: "metadata.k: invalid value" },
    { req: { clientKey: "has space" }, err: 'clientKey: invalid value "has space"' },
    { req: { clientKey: "" }, err: 'clientKey: invalid value ""' },
  ])("rejects $err", ({ req, err }) => {
    expect(() => resolveSpec({ ...ok, ...req } as CreateRequest, cfg, catalog, now)).toThrow(err);
  });

  it("the same (owner, clientKey) always maps to the same id; other owners and keys do not", () => {
    expect(sandboxId("alice", "k1")).toBe(sandboxId("alice", "k1"));
    expect(sandboxId("alice", "k1")).not.toBe(sandboxId("bob", "k1"));
    expect(sandboxId("alice", "k1")).not.toBe(sandboxId("alice", "k2"));
    expect(sandboxId("alice")).not.toBe(sandboxId("alice"));
    expect(isSandboxId(sandboxId("alice", "k1"))).toBe(true);
  });
});
