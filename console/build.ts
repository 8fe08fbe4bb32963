// Builds the web console (console/src) into static assets: esbuild bundles the TypeScript into
// two scripts (the console, and xterm.js, which the terminal loads when opened) and the
// stylesheet, xterm's included, into one file; index.html is copied. Run by `npm ci` (the
// `prepare` script) and `npm run build:console`, writing dist/console, which the service serves
// (runtime/server/console.ts); the runtime bundle (components/runtime/bundle.ts) carries the same
// assets in memory, so a deployed runtime serves them with no file beside it.

import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { buildSync } from "esbuild";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const SRC = "console/src";
export const CONSOLE_OUT = "dist/console";

/** file name -> contents, as runtime/server/console.ts serves them */
export type BuiltConsole = Record<string, string>;

/** The console's assets, built in memory. Throws esbuild's first error. */
export function buildConsoleAssets(root = ROOT): BuiltConsole {
  const result = buildSync({
    absWorkingDir: root,
    entryPoints: {
      "app.js": join(root, SRC, "main.ts"),
      // xterm.js apart: loaded only when a terminal opens (console/src/xtermEntry.ts)
      "xterm.js": join(root, SRC, "xtermEntry.ts"),
      "app.css": join(root, SRC, "console.css"),
    },
    entryNames: "[name]",
    bundle: true,
    format: "iife",
    platform: "browser",
    target: "es2022",
    minify: true,
    legalComments: "none",
    outdir: join(root, "console-build"),
    write: false,
    logLevel: "silent",
  });
  const assets: BuiltConsole = { "index.html": readFileSync(join(root, SRC, "index.html"), "utf8") };
  for (const f of result.outputFiles) {
    // esbuild names the entries app.js.js and app.css.css: the key is what index.html links
    const name = f.path.slice(f.path.lastIndexOf("/") + 1).replace(/\.(js|css)\.\1$/, ".$1");
    assets[name] = f.text;
  }
  return assets;
}

/** Builds into root/dist/console (replaced whole, so a removed file does not linger). */
export function writeConsole(root = ROOT): string {
  const assets = buildConsoleAssets(root);
  const out = join(root, CONSOLE_OUT);
  const tmp = `${out}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  for (const [name, body] of Object.entries(assets)) writeFileSync(join(tmp, name), body);
  rmSync(out, { recursive: true, force: true });
  renameSync(tmp, out);
  return out;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const t0 = Date.now();
  const out = writeConsole();
  process.stdout.write(`sbx console built: ${out} in ${Date.now() - t0} ms\n`);
}
