import { timingSafeEqual } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { addToken, hashToken, parseTokensFile, TokenStore } from "./tokens.ts";

const dir = mkdtempSync(join(tmpdir(), "sbx-tokens-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("tokens", () => {
  it("stores only hashes, 0600, and authenticates the plain token", () => {
    const path = join(dir, "tokens.json");
    const alice = addToken(path, "alice");
    const bob = addToken(path, "bob");
    const text = readFileSync(path, "utf8");
    expect(text).not.toContain(alice);
    expect(text).toContain(hashToken(alice));
    expect(statSync(path).mode & 0o777).toBe(0o600);
    const store = TokenStore.fromFile(path);
    expect(store.authenticate(alice)).toBe("alice");
    expect(store.authenticate(bob)).toBe("bob");
    expect(store.authenticate(alice.slice(0, -1))).toBeUndefined();
    expect(store.authenticate("")).toBeUndefined();
    expect(store.authenticate(undefined)).toBeUndefined();
  });

  it.each([
    { text: "nope", err: "must be JSON" },
    { text: '["a"]', err: "must be a JSON object" },
    { text: '{"sbx_plaintoken":"alice"}', err: "never store plain tokens" },
    { text: `{"${"a".repeat(64)}":""}`, err: "owner must be a non-empty string" },
  ])("rejects a bad tokens file: $err", ({ text, err }) => {
    expect(() => parseTokensFile("tokens.json", text)).toThrow(err);
  });

  it.each(["hit on the first entry", "hit on the last entry", "miss"])(
    "compares every stored hash in constant time (%s)",
    (which) => {
      const tokens = ["t-one", "t-two", "t-three", "t-four"];
      let calls = 0;
      const counting = (a: Buffer, b: Buffer) => {
        calls++;
        expect(a.length).toBe(32);
        return timingSafeEqual(a, b);
      };
      const store = new TokenStore(new Map(tokens.map((t, i) => [hashToken(t), `owner${i}`])), counting);
      const presented = which === "miss" ? "t-none" : which.includes("first") ? "t-one" : "t-four";
      const owner = store.authenticate(presented);
      expect(owner).toBe(which === "miss" ? undefined : which.includes("first") ? "owner0" : "owner3");
      expect(calls).toBe(tokens.length);
    },
  );
});

describe("TokenFile", () => {
  it("picks up tokens added while the service runs, at most once a second, keeping the last good on a bad edit", async () => {
    const { writeFileSync } = await import("node:fs");
    const { TokenFile } = await import("./tokens.ts");
    const path = join(dir, "live-tokens.json");
    const first = addToken(path, "alice");
    let now = 1_000_000;
    const errors: unknown[] = [];
    const file = new TokenFile(
      path,
      (e) => errors.push(e),
      () => now,
    );
    expect(file.authenticate(first)).toBe("alice");
    const second = addToken(path, "bob");
    now += 500; // within the re-check interval: not seen yet
    expect(file.authenticate(second)).toBeUndefined();
    now += 600;
    expect(file.authenticate(second)).toBe("bob");
    writeFileSync(path, "{ broken");
    now += 1500;
    expect(file.authenticate(first)).toBe("alice");
    now += 1500;
    expect(file.authenticate(first)).toBe("alice");
    expect(errors).toHaveLength(1);
    expect(String(errors[0])).toContain("must be JSON");
  });
});
