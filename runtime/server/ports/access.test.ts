// The file-backed exposure store: a sandbox without exposures (every relayed request of the
// usual case) is answered from the directory listing read once, and what it keeps matches disk.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { FilePortAccessStore, hashPortToken, tokenMatches } from "./access.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function accessDir(): string {
  const d = mkdtempSync(join(tmpdir(), "sbx-port-access-"));
  dirs.push(d);
  return join(d, "port-access");
}

const at = new Date(0);

describe("FilePortAccessStore", () => {
  it("answers a sandbox without exposures from its one listing of the directory, with no file read", async () => {
    const dir = accessDir();
    const store = new FilePortAccessStore(dir);
    expect(await store.get("sb-none", 8000)).toBeUndefined(); // lists the (missing) dir once
    await new FilePortAccessStore(dir).expose("sb-none", 8000, "alice", { public: true }, at);
    // written behind its back (no other writer exists in production): a store that read the
    // file on every miss would see it now
    expect(await store.get("sb-none", 8000)).toBeUndefined();
  });

  it("keeps exposures across a restart, closes and forgets them", async () => {
    const dir = accessDir();
    const store = new FilePortAccessStore(dir);
    await store.expose("sb-a", 8000, "alice", { public: true }, at);
    await store.expose("sb-a", 9000, "alice", { public: false, token: "tok" }, at);
    const restarted = new FilePortAccessStore(dir);
    expect(await restarted.get("sb-a", 8000)).toMatchObject({ owner: "alice", public: true });
    const tokenAccess = await restarted.get("sb-a", 9000);
    expect(tokenAccess?.tokenSha256).toBe(hashPortToken("tok"));
    expect(tokenMatches(tokenAccess!, "tok")).toBe(true);
    expect(await restarted.close("sb-a", 8000)).toBe(true);
    expect(await new FilePortAccessStore(dir).get("sb-a", 8000)).toBeUndefined();
    await restarted.forget("sb-a");
    expect(await restarted.get("sb-a", 9000)).toBeUndefined();
    expect(await new FilePortAccessStore(dir).get("sb-a", 9000)).toBeUndefined();
  });

  it("sees an exposure file that existed when it listed the directory", async () => {
    const dir = accessDir();
    await new FilePortAccessStore(dir).expose("sb-b", 8000, "bob", { public: true }, at);
    writeFileSync(join(dir, "unrelated.txt"), "x");
    expect(await new FilePortAccessStore(dir).get("sb-b", 8000)).toMatchObject({ owner: "bob", public: true });
  });
});
