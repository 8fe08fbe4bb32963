// Ships the runtime without building an image on the deploying machine: esbuild bundles the
// entry (and every dependency) into one ESM file at deploy time; packBundle gzips it, cuts the
// gzip into parts that each fit a ConfigMap, and hashes it so a code change rolls the Deployments.

import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import { buildSync } from "esbuild";
import { buildConsoleAssets } from "../../console/build.ts";
import { ValidationError } from "../../runtime/core/errors.ts";

/** ConfigMaps hold at most 1 MiB; keep 16 KiB of each for metadata and the key name. */
export const BUNDLE_PART_BYTES = 1024 * 1024 - 16 * 1024;
/**
 * The whole gzipped bundle, over all its ConfigMaps. The runtime outgrew one ConfigMap as it
 * gained the E2B layer; eight leave room to grow while keeping a deploy's objects few. Past it,
 * a prebuilt image is the way.
 */
export const BUNDLE_PARTS_MAX = 8;
export const BUNDLE_LIMIT_BYTES = BUNDLE_PART_BYTES * BUNDLE_PARTS_MAX;
export const BUNDLE_FILE = "runtime.mjs";

export interface RuntimeBundle {
  /** sha256 hex of the uncompressed bundle: the pod-template annotation and ConfigMap suffix */
  sha256: string;
  /** sha256 of the in-sandbox helper the bundle carries for pods' command channels */
  helperSha256?: string;
  /** why it carries none (the helper could not be built here): every pod then execs per command */
  helperMissing?: string;
  /** the gzipped bundle cut into parts of at most BUNDLE_PART_BYTES, each base64 (one ConfigMap's binaryData) */
  parts: string[];
  bytes: number;
  gzBytes: number;
}

/** The ConfigMap key of part i: the unpack step concatenates them in this order. */
export function bundlePartKey(i: number): string {
  return `${BUNDLE_FILE}.gz.${String(i).padStart(2, "0")}`;
}

/** The gzipped bundle, parts joined again (what the pod's unpack step does). */
export function joinBundleParts(bundle: RuntimeBundle): Buffer {
  return Buffer.concat(bundle.parts.map((p) => Buffer.from(p, "base64")));
}

// CommonJS dependencies call require(); an ESM bundle has none unless we create one.
const BANNER =
  'import { createRequire as __sbxCreateRequire } from "node:module"; const require = __sbxCreateRequire(import.meta.url);';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
/** the global the runtime reads the helper from (runtime/k8s/channel/embedded.ts) */
const HELPER_GLOBAL = "__sbxHelperGz";
/** the global the runtime serves the web console from (runtime/server/console.ts) */
const CONSOLE_GLOBAL = "__sbxConsoleAssets";

export type BundledHelper = { bytes: Buffer; sha256: string } | { missing: string };

/**
 * The in-sandbox helper a deployed manager copies into pods (runtime/k8s/channel/open.ts): built
 * from tools/local-helper by its idempotent script (a no-op when current). A manager pod has no
 * compiler, so the bundle is its only way to get one.
 */
export function helperForBundle(): BundledHelper {
  const r = spawnSync("bash", [join(REPO, "scripts/build-local-helper.sh")], { encoding: "utf8", timeout: 180_000 });
  if (r.status !== 0) return { missing: (r.stderr || r.error?.message || `exit ${r.status}`).trim() };
  const bytes = readFileSync(join(REPO, ".cache/local/sbx-helper"));
  return { bytes, sha256: createHash("sha256").update(bytes).digest("hex") };
}

/** Bundle `entry` into one ESM file for Node 20, packed for a ConfigMap. Throws with esbuild's first error. */
export function bundleRuntime(entry: string, helper: BundledHelper = helperForBundle()): RuntimeBundle {
  const packed = packBundle(buildRuntimeCode(entry, helper));
  return "missing" in helper
    ? { ...packed, helperMissing: helper.missing }
    : { ...packed, helperSha256: helper.sha256 };
}

/**
 * The bundled code itself, before the ConfigMap size check (tests run it; a prebuilt image ships
 * it). Its banner carries the helper (when given) and the web console's assets.
 */
export function buildRuntimeCode(entry: string, helper?: BundledHelper): string {
  const carried =
    helper && !("missing" in helper)
      ? `globalThis.${HELPER_GLOBAL}=${JSON.stringify(gzipSync(helper.bytes, { level: 9 }).toString("base64"))};`
      : "";
  // the web console's assets: a deployed runtime has no dist/ beside it (about 380 KiB, xterm.js most of it)
  const consoleAssets = `globalThis.${CONSOLE_GLOBAL}=${JSON.stringify(buildConsoleAssets())};`;
  const result = buildSync({
    entryPoints: [entry],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    minify: true,
    // minified identifiers, but Function.name/class names survive (error names, plugin names)
    keepNames: true,
    legalComments: "none",
    banner: { js: BANNER + carried + consoleAssets },
    write: false,
    logLevel: "silent",
  });
  const file = result.outputFiles[0];
  if (!file)
    throw new ValidationError("runtime.entry", entry, "esbuild produced no output; point it at runtime/main.ts");
  return file.text;
}

/** Hash, gzip, size-check and cut bundled code into ConfigMap-sized parts. Pure apart from CPU. */
export function packBundle(code: string): RuntimeBundle {
  const raw = Buffer.from(code, "utf8");
  const gz = gzipSync(raw, { level: 9 });
  if (gz.length > BUNDLE_LIMIT_BYTES) {
    throw new ValidationError(
      "runtime bundle",
      `${gz.length} bytes gzipped`,
      `exceeds the ${BUNDLE_LIMIT_BYTES}-byte budget of ${BUNDLE_PARTS_MAX} ConfigMaps; set sbx:runtime.image to a prebuilt runtime image instead`,
    );
  }
  const parts: string[] = [];
  for (let at = 0; at < gz.length; at += BUNDLE_PART_BYTES)
    parts.push(gz.subarray(at, at + BUNDLE_PART_BYTES).toString("base64"));
  return {
    sha256: createHash("sha256").update(raw).digest("hex"),
    parts,
    bytes: raw.length,
    gzBytes: gz.length,
  };
}
