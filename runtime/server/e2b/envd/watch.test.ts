import { describe, expect, it } from "vitest";
import { EventType } from "./gen/filesystem/filesystem_pb.ts";
import { decideWatchEvents, type Listing, ListingReader, type WatchedEntry } from "./watch.ts";

const f = (inode: string, size = "0", mtime = "1.0", mode = "644"): WatchedEntry => ({
  type: "f",
  inode,
  size,
  mtime,
  mode,
});
const d = (inode: string, mtime = "1.0"): WatchedEntry => ({ type: "d", inode, size: "4096", mtime, mode: "755" });
const listing = (entries: Record<string, WatchedEntry>): Listing => new Map(Object.entries(entries));
const { CREATE, WRITE, REMOVE, RENAME, CHMOD } = EventType;

describe("decideWatchEvents", () => {
  it.each([
    ["nothing changed", { a: f("1") }, { a: f("1") }, []],
    ["an empty file made", {}, { a: f("1") }, [["a", CREATE]]],
    [
      "a file made with content: create, then write",
      {},
      { a: f("1", "5") },
      [
        ["a", CREATE],
        ["a", WRITE],
      ],
    ],
    ["a file written (size or mtime)", { a: f("1", "5") }, { a: f("1", "5", "2.0") }, [["a", WRITE]]],
    ["a file removed", { a: f("1") }, {}, [["a", REMOVE]]],
    [
      "a file renamed (same inode): rename of the old name, create of the new",
      { a: f("1", "5") },
      { b: f("1", "5") },
      [
        ["a", RENAME],
        ["b", CREATE],
      ],
    ],
    ["a mode change", { a: f("1") }, { a: f("1", "0", "1.0", "600") }, [["a", CHMOD]]],
    [
      "a name that now is another file (new inode)",
      { a: f("1") },
      { a: f("2", "3") },
      [
        ["a", REMOVE],
        ["a", CREATE],
        ["a", WRITE],
      ],
    ],
    ["a directory whose mtime moved (its entries changed) is no event", { sub: d("7") }, { sub: d("7", "9.0") }, []],
    [
      "nested names, as a recursive watch lists them",
      { sub: d("7") },
      { sub: d("7"), "sub/x": f("8") },
      [["sub/x", CREATE]],
    ],
  ])("%s", (_what, before, after, events) => {
    expect(decideWatchEvents(listing(before), listing(after))).toEqual(
      (events as [string, EventType][]).map(([name, type]) => ({ name, type })),
    );
  });
});

describe("ListingReader", () => {
  const entry = (name: string) => `f\0${name.length}\x000\x001.5\x00644\0${name}\0`;

  it("cuts listings at the lone NUL, across chunk boundaries, keeping odd names whole", () => {
    const r = new ListingReader(1024);
    const text = `${entry("a b")}${entry("new\nline")}\0${entry("c")}\0`;
    const bytes = Buffer.from(text);
    const got: Listing[] = [];
    for (let i = 0; i < bytes.length; i += 3) got.push(...r.feed(bytes.subarray(i, i + 3)));
    expect(got.map((l) => [...l.keys()])).toEqual([["a b", "new\nline"], ["c"]]);
    expect(got[0]!.get("a b")).toEqual({ type: "f", inode: "3", size: "0", mtime: "1.5", mode: "644" });
  });

  it("an empty directory is an empty listing", () => {
    expect(new ListingReader(1024).feed(Buffer.from("\0")).map((l) => l.size)).toEqual([0]);
  });

  it("refuses a listing over its byte bound", () => {
    const r = new ListingReader(32);
    expect(() => r.feed(Buffer.from(entry("x".repeat(40))))).toThrow("a listing of more than 32 bytes");
  });
});
