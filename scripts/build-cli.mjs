// Builds the `sbx` CLI once so a command does not transpile TypeScript at every start: esbuild
// bundles runtime/cli/main.ts (our code only; packages in node_modules stay imports that Node
// resolves at run time) into dist/cli/<build id>/, code-split so a verb loads only what it uses.
//
// Run by `npm ci`/`npm install` (the `prepare` script) and by bin/sbx.mjs whenever the build is
// missing or stale. Staleness is decided from dist/cli/manifest.json: every file esbuild read,
// with its mtime and size. Checking it is one stat per input (about 90 files, 1.5-4 ms); an
// edit, a deleted file or a changed build script makes the next `sbx` call rebuild (0.25-0.7 s
// on 2 cores) before it runs.
//
// Concurrent builds (scripts calling sbx in parallel right after an edit) are safe: each build
// writes a directory of its own named by the hash of its output and renames it into place, then
// replaces the manifest with a rename. A reader sees the old build or the new one, never half.
import {
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const ENTRY = "runtime/cli/main.ts";
const OUT = "dist/cli";
const MANIFEST = "manifest.json";
const FORMAT = 1;
/** inputs esbuild does not report but that change what it produces */
const EXTRA_INPUTS = ["scripts/build-cli.mjs", "tsconfig.json"];
/** builds replaced longer ago than this are removed (a CLI still running may load a chunk lazily) */
const KEEP_OLD_MS = 10 * 60_000;
/** file times are coarser than Date.now() (a kernel tick): "changed during the build" has this slack */
const MTIME_SLACK_MS = 50;

/** [mtimeMs, size] of root/path, or undefined when it is gone. */
function fingerprint(root, path) {
  try {
    const s = statSync(join(root, path));
    return [s.mtimeMs, s.size];
  } catch {
    return undefined;
  }
}

/**
 * The built CLI's entry file if dist/cli holds a build of the current sources, else undefined.
 * This is the hot path of every `sbx` call: no esbuild, one small JSON read and a stat per input.
 */
export function freshCliEntry(root = ROOT) {
  let manifest;
  try {
    manifest = JSON.parse(readFileSync(join(root, OUT, MANIFEST), "utf8"));
  } catch {
    return undefined; // never built (or a torn manifest from an older format): build it
  }
  if (manifest?.format !== FORMAT || typeof manifest.entry !== "string" || typeof manifest.inputs !== "object")
    return undefined;
  for (const [path, want] of Object.entries(manifest.inputs)) {
    const got = fingerprint(root, path);
    if (!got || got[0] !== want[0] || got[1] !== want[1]) return undefined;
  }
  const entry = join(root, OUT, manifest.entry);
  return existsSync(entry) ? entry : undefined;
}

/**
 * Bundled code keeps each source file's own import.meta.url (files that locate the repo from it,
 * such as the local helper's path, stay right): the output sits at a fixed depth, so the source
 * file is a fixed relative URL away from the chunk.
 */
function sourceUrlPlugin(root) {
  return {
    name: "sbx-source-url",
    setup(build) {
      build.onLoad({ filter: /\.ts$/ }, (args) => {
        const text = readFileSync(args.path, "utf8");
        if (!text.includes("import.meta.url")) return undefined;
        const fromOut = relative(join(root, OUT, "build-id"), args.path)
          .split("\\")
          .join("/");
        return {
          contents: text.replaceAll("import.meta.url", `new URL(${JSON.stringify(fromOut)}, import.meta.url).href`),
          loader: "ts",
        };
      });
    },
  };
}

/** a name no concurrent build picks; not crypto (the hot path must not load node:crypto) */
const tmpName = (path) => `${path}.tmp-${process.pid}-${Math.random().toString(36).slice(2, 10)}`;

/** Writes files into a fresh directory and renames it to `dir`; a concurrent identical build may win. */
function writeDirAtomically(dir, files) {
  const tmp = tmpName(dir);
  for (const [name, contents] of files) {
    mkdirSync(dirname(join(tmp, name)), { recursive: true });
    writeFileSync(join(tmp, name), contents);
  }
  try {
    renameSync(tmp, dir);
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    // same id = same bytes: another process just built exactly this
    if (!existsSync(join(dir, files[0][0]))) throw err;
  }
}

function writeFileAtomically(path, contents) {
  const tmp = tmpName(path);
  writeFileSync(tmp, contents);
  renameSync(tmp, path);
}

function currentBuildId(outDir) {
  try {
    return String(JSON.parse(readFileSync(join(outDir, MANIFEST), "utf8")).entry).split("/")[0];
  } catch {
    return undefined;
  }
}

function touch(path) {
  try {
    const now = new Date();
    utimesSync(path, now, now);
  } catch {
    // pruned meanwhile
  }
}

/** Removes builds other than `keep` that were replaced long enough ago, and stray temp dirs. */
function pruneOldBuilds(outDir, keep, now = Date.now()) {
  for (const name of readdirSync(outDir)) {
    if (name === keep || name === MANIFEST) continue;
    const path = join(outDir, name);
    try {
      if (now - statSync(path).mtimeMs > KEEP_OLD_MS) rmSync(path, { recursive: true, force: true });
    } catch {
      // removed by a concurrent prune
    }
  }
}

/**
 * Builds the CLI into root/dist/cli and returns its entry file. Throws esbuild's errors (a
 * syntax error in runtime/ reads the same as it would from tsx). `now` is the clock that
 * brackets the build (injected by the tests).
 */
export async function buildCli(root = ROOT, { now = Date.now } = {}) {
  const [{ build }, { createHash }] = await Promise.all([import("esbuild"), import("node:crypto")]);
  const outDir = join(root, OUT);
  const staging = join(outDir, "build-id");
  const startedAt = now();
  const result = await build({
    absWorkingDir: root,
    entryPoints: { sbx: join(root, ENTRY) },
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "node",
    target: "node20",
    packages: "external",
    outdir: staging,
    outExtension: { ".js": ".mjs" },
    keepNames: true,
    metafile: true,
    write: false,
    logLevel: "silent",
    plugins: [sourceUrlPlugin(root)],
  });
  // The inputs are known only now. One edited while esbuild ran may be built from its old text:
  // it gets a fingerprint no file has, so the next call builds again. (A time in the future is
  // clock skew, not an edit: trusted, or every call would rebuild.)
  const finishedAt = now();
  const inputs = {};
  for (const path of [...Object.keys(result.metafile.inputs), ...EXTRA_INPUTS]) {
    const fp = fingerprint(root, path);
    if (fp) inputs[path] = fp[0] >= startedAt - MTIME_SLACK_MS && fp[0] <= finishedAt + MTIME_SLACK_MS ? [-1, -1] : fp;
  }
  const files = result.outputFiles.map((f) => [relative(staging, f.path), f.contents]);
  files.sort(([a], [b]) => (a === "sbx.mjs" ? -1 : b === "sbx.mjs" ? 1 : a < b ? -1 : 1));
  const hash = createHash("sha256");
  for (const [name, contents] of files) hash.update(name).update(contents);
  const id = hash.digest("hex").slice(0, 16);
  mkdirSync(outDir, { recursive: true });
  writeDirAtomically(join(outDir, id), files);
  const previous = currentBuildId(outDir);
  writeFileAtomically(
    join(outDir, MANIFEST),
    `${JSON.stringify({ format: FORMAT, entry: `${id}/sbx.mjs`, builtAt: new Date().toISOString(), inputs })}\n`,
  );
  // the replaced build's age now counts from its replacement (see KEEP_OLD_MS)
  if (previous && previous !== id) touch(join(outDir, previous));
  pruneOldBuilds(outDir, id);
  return join(outDir, id, "sbx.mjs");
}

/**
 * npm does not link a package's own bin into its node_modules/.bin; linking it there lets a
 * shell put `sbx` on its PATH with `export PATH="$PWD/node_modules/.bin:$PATH"`.
 */
export function linkLocalBin(root = ROOT) {
  const binDir = join(root, "node_modules", ".bin");
  if (!existsSync(binDir)) return undefined;
  const link = join(binDir, "sbx");
  try {
    lstatSync(link);
    return link; // already there (ours, or something the developer put there on purpose)
  } catch {
    try {
      symlinkSync(relative(binDir, join(root, "bin", "sbx.mjs")), link);
    } catch (err) {
      if (err?.code !== "EEXIST") throw err; // a concurrent install linked it first
    }
    return link;
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const t0 = Date.now();
  const entry = await buildCli();
  const link = linkLocalBin();
  process.stdout.write(
    `sbx CLI built: ${relative(process.cwd(), entry)} in ${Date.now() - t0} ms${link ? `; linked ${relative(process.cwd(), link)}` : ""}\n`,
  );
}
