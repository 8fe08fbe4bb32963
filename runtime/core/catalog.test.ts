import { mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ImageCatalog, parseCatalog } from "./catalog.ts";
import { silentLogger } from "./log.ts";

const dirs: string[] = [];
const catalogs: ImageCatalog[] = [];
afterEach(() => {
  for (const c of catalogs.splice(0)) c.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), "sbx-catalog-"));
  dirs.push(d);
  return d;
}

function nextReload(c: ImageCatalog): Promise<string[]> {
  return new Promise((resolve) => {
    const off = c.onReload((p) => {
      off();
      resolve(p);
    });
  });
}

describe("parseCatalog", () => {
  it.each([
    { text: "{", err: "must be JSON" },
    { text: "[]", err: "must be a JSON object" },
    { text: '{"Bad_Name":"img"}', err: "profile names are lowercase" },
    { text: '{"ml":""}', err: "must be a non-empty image reference" },
    { text: '{"ml":3}', err: "must be a non-empty image reference" },
  ])("rejects $text", ({ text, err }) => {
    expect(() => parseCatalog("catalog.json", text)).toThrow(err);
  });
  it("accepts profiles", () => {
    expect(parseCatalog("c", '{"base":"host","ml":"registry/ml:1"}')).toEqual({ base: "host", ml: "registry/ml:1" });
  });
});

describe("ImageCatalog", () => {
  it("unknown profile is a validation error listing the valid ones", () => {
    const c = new ImageCatalog({ inline: { base: "host", data: "img/data" }, logger: silentLogger() });
    expect(c.resolve("data")).toEqual({ profile: "data", image: "img/data" });
    expect(() => c.resolve("nope")).toThrow('profile: invalid value "nope": unknown profile; use one of: base, data');
    expect(() => c.resolve("toString")).toThrow("unknown profile");
  });

  it("reloads the file on change and keeps the last good catalog on a parse error", async () => {
    const d = tmp();
    const path = join(d, "catalog.json");
    writeFileSync(path, JSON.stringify({ ml: "img/ml:1" }));
    const c = new ImageCatalog({ inline: { base: "host" }, path, logger: silentLogger(), debounceMs: 10 });
    catalogs.push(c);
    c.start();
    expect(c.profiles()).toEqual(["base", "ml"]);

    let reloaded = nextReload(c);
    writeFileSync(path, JSON.stringify({ ml: "img/ml:2", rl: "img/rl:1" }));
    expect(await reloaded).toEqual(["base", "ml", "rl"]);
    expect(c.resolve("ml").image).toBe("img/ml:2");

    // a broken write keeps the last good entries
    writeFileSync(path, "{ not json");
    expect(c.reload()).toBe(false);
    expect(c.resolve("rl").image).toBe("img/rl:1");

    // an atomic replace (how ConfigMaps and editors update) is seen too
    reloaded = nextReload(c);
    writeFileSync(join(d, "new.json"), JSON.stringify({ web: "img/web:1" }));
    renameSync(join(d, "new.json"), path);
    expect(await reloaded).toEqual(["base", "web"]);
    expect(() => c.resolve("ml")).toThrow("use one of: base, web");
  });

  it("a bad file at start is an error naming the path", () => {
    const d = tmp();
    const path = join(d, "catalog.json");
    writeFileSync(path, "nope");
    expect(() => new ImageCatalog({ inline: {}, path, logger: silentLogger() })).toThrow(`${path}: invalid value`);
  });
});
