#!/usr/bin/env node
// `npx sbx ...`: loads the TypeScript CLI through tsx's loader API (no build step).
import { register } from "tsx/esm/api";

register();
const { runCli } = await import("../runtime/cli/main.ts");
const code = await runCli(process.argv.slice(2), { env: process.env, io: { stdout: process.stdout, stderr: process.stderr, stdin: process.stdin } });
process.stdout.write("", () => process.exit(code));
