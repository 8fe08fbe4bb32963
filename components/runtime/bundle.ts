// Ships the runtime without building an image on the deploying machine: esbuild bundles the
// entry (and every dependency) into one ESM file at deploy time; packBundle gzips it for a
// ConfigMap and hashes it so a code change rolls the Deployments.
import { buildSync } from "esbuild";
import { createHash } from "node:crypto";
import { gzipSync } from "node:zlib";
import { ValidationError } from "../../runtime/core/errors.ts";

/** ConfigMaps hold at most 1 MiB; keep 16 KiB for metadata and the key name. */
export const BUNDLE_LIMIT_BYTES = 1024 * 1024 - 16 * 1024;
export const BUNDLE_FILE = "runtime.mjs";

export interface RuntimeBundle {
  /** sha256 hex of the uncompressed bundle: the pod-template annotation and ConfigMap suffix */
  sha256: string;
  /** the gzipped bundle, base64 (ConfigMap binaryData) */
  gzBase64: string;
  bytes: number;
  gzBytes: number;
}

// CommonJS dependencies call require(); an ESM bundle has none unless we create one.
const BANNER =
  'import { createRequire as __sbxCreateRequire } from "node:module"; const require = __sbxCreateRequire(import.meta.url);';

/** Bundle `entry` into one ESM file for Node 20. Throws with esbuild's first error. */
export function bundleRuntime(entry: string): RuntimeBundle {
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
  return packBundle(file.text);
}

/** Hash, gzip and size-check bundled code. Pure apart from CPU. */
export function packBundle(code: string): RuntimeBundle {
  const raw = Buffer.from(code, "utf8");
  const gz = gzipSync(raw, { level: 9 });
  if (gz.length > BUNDLE_LIMIT_BYTES) {
    throw new ValidationError(
      "runtime bundle",
      `${gz.length} bytes gzipped`,
      `exceeds the ${BUNDLE_LIMIT_BYTES}-byte ConfigMap budget; set sbx:runtime.image to a prebuilt runtime image instead`,
    );
  }
  return {
    sha256: createHash("sha256").update(raw).digest("hex"),
    gzBase64: gz.toString("base64"),
    bytes: raw.length,
    gzBytes: gz.length,
  };
}
