import type { SecureContext, SecureContextOptions } from "node:tls";
import { describe, expect, it } from "vitest";
import { TlsContextCache } from "./client.ts";

/** a cache whose factory records what it was asked to build */
function counted() {
  const built: SecureContextOptions[] = [];
  const cache = new TlsContextCache((o) => {
    built.push(o);
    return { built: built.length } as unknown as SecureContext;
  });
  return { cache, built };
}

const material = { ca: Buffer.from("ca-1"), cert: Buffer.from("cert-1"), key: Buffer.from("key-1") };

describe("TlsContextCache", () => {
  it("builds one context for the same material, read afresh on every connect", () => {
    const { cache, built } = counted();
    const first = cache.contextFor({ ...material, servername: "a" } as SecureContextOptions);
    // client-node reads the files again for each connection: equal bytes, new buffers
    const again = cache.contextFor({
      ca: Buffer.from("ca-1"),
      cert: Buffer.from("cert-1"),
      key: Buffer.from("key-1"),
      servername: "b",
    } as SecureContextOptions);
    expect(again).toBe(first);
    // only the fields that shape a context reach the factory (servername belongs to the connection)
    expect(built).toEqual([material]);
  });

  it.each([
    ["a rotated certificate", { ...material, cert: Buffer.from("cert-2") }],
    ["a rotated key", { ...material, key: Buffer.from("key-2") }],
    ["another CA", { ...material, ca: [Buffer.from("ca-1"), Buffer.from("ca-2")] }],
    ["no client certificate", { ca: material.ca }],
  ])("builds a new context for %s", (_, changed) => {
    const { cache, built } = counted();
    const first = cache.contextFor(material);
    expect(cache.contextFor(changed)).not.toBe(first);
    expect(built).toHaveLength(2);
  });
});
