#!/usr/bin/env node
// `sbx ...`: runs the CLI that scripts/build-cli.mjs bundled into dist/cli (built by `npm ci`).
// Transpiling the TypeScript at every start cost ~0.5 s per call; agents call the CLI in loops.
// After an edit under runtime/ the first call rebuilds (0.25-0.7 s), so the build is never stale.
// If building is impossible (a read-only checkout, a syntax error), it runs the TypeScript
// through tsx as before: slower, never wrong, and a syntax error then reads as tsx reports it.
import { pathToFileURL } from "node:url";
import { buildCli, freshCliEntry } from "../scripts/build-cli.mjs";

async function loadCli() {
  const entry = freshCliEntry();
  if (entry) return import(pathToFileURL(entry).href);
  try {
    return await import(pathToFileURL(await buildCli()).href);
  } catch (err) {
    // only a person at a terminal is told: scripts compare stderr, and the output is the same
    if (process.stderr.isTTY)
      process.stderr.write(
        `sbx: running from TypeScript (slower): the CLI build failed: ${err instanceof Error ? err.message.split("\n")[0] : err}\n`,
      );
    const { register } = await import("tsx/esm/api");
    register();
    return import("../runtime/cli/main.ts");
  }
}

const { runCli } = await loadCli();
const code = await runCli(process.argv.slice(2), {
  env: process.env,
  io: { stdout: process.stdout, stderr: process.stderr, stdin: process.stdin },
});
// let stdout drain before exiting (pipes are asynchronous)
process.stdout.write("", () => process.exit(code));
