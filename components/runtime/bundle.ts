// Ships the runtime without building an image on the deploying machine: esbuild bundles the
// entry (and every dependency) into one ESM file at deploy time; packBundle gzips it, cuts the
// gzip into parts that each fit a ConfigMap, and hashes it so a code change rolls the Deployments.
import { buildSync } from "esbuild";
import { createHash } from "node:crypto";
import { gzipSync } from "node:zlib";
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

/** Bundle `entry` into one ESM file for Node 20, packed for a ConfigMap. Throws with esbuild's first error. */
export function bundleRuntime(entry: string): RuntimeBundle {
  return packBundle(buildRuntimeCode(entry));
}

/** The bundled code itself, before the ConfigMap size check (tests run it; a prebuilt image ships it). */
export function buildRuntimeCode(entry: string): string {
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
    banner: { js: BANNER },
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
