// bin/sbx.mjs runs the CLI prebuilt by scripts/build-cli.mjs, not TypeScript through tsx, and the
// build follows the sources: a fresh build is reused untouched, an edit under runtime/ is picked
// up by the next call, and a build that cannot be written falls back to tsx with the same output.
// What ran is read from a module-resolution hook (every URL Node resolved), never from timing.
// The edit cases run on a copy of the repo's code, so the shared tree's sources are not touched.
import { spawnSync } from "node:child_process";
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const repo = resolve(import.meta.dirname, "../..");
let work: string;
let copy: string;
let hook: string;

beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), "sbx-cli-build-"));
  hook = join(work, "log-modules.mjs");
  writeFileSync(
    join(work, "hooks.mjs"),
    'import { appendFileSync } from "node:fs";\n' +
      "export async function resolve(specifier, context, next) {\n" +
      "  const r = await next(specifier, context);\n" +
      "  appendFileSync(process.env.SBX_TEST_MODULE_LOG, r.url + '\\n');\n" +
      "  return r;\n" +
      "}\n",
  );
  writeFileSync(
    hook,
    `import { register } from "node:module";\nregister(${JSON.stringify(pathToFileURL(join(work, "hooks.mjs")).href)});\n`,
  );
  // the code bin/sbx.mjs needs; the packages linked one by one, with a .bin of the copy's own
  copy = join(work, "repo");
  for (const p of ["bin", "scripts/build-cli.mjs", "runtime", "package.json", "tsconfig.json"])
    cpSync(join(repo, p), join(copy, p), { recursive: true });
  mkdirSync(join(copy, "node_modules", ".bin"), { recursive: true });
  for (const pkg of readdirSync(join(repo, "node_modules")))
    if (pkg !== ".bin") symlinkSync(join(repo, "node_modules", pkg), join(copy, "node_modules", pkg));
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

let runs = 0;
/** runs the CLI with the hook; returns its output and every module URL it resolved */
function sbx(
  root: string,
  args: string[],
  command = process.execPath,
  argv0: string[] = [join(root, "bin/sbx.mjs")],
  env: Record<string, string> = {},
) {
  const log = join(work, `modules-${++runs}.log`);
  writeFileSync(log, "");
  const r = spawnSync(command, [...argv0, ...args], {
    cwd: root,
    encoding: "utf8",
    timeout: 60_000,
    env: {
      ...process.env,
      NODE_OPTIONS: `--import ${pathToFileURL(hook).href}`,
      SBX_TEST_MODULE_LOG: log,
      PATH: `${join(root, "node_modules/.bin")}:${process.env.PATH}`,
      ...env,
    },
  });
  return {
    code: r.status,
    stdout: r.stdout,
    stderr: r.stderr,
    modules: readFileSync(log, "utf8").split("\n").filter(Boolean),
  };
}

const manifestOf = (root: string) =>
  JSON.parse(readFileSync(join(root, "dist/cli/manifest.json"), "utf8")) as { entry: string; builtAt: string };
const fromTypeScript = (modules: string[]) => modules.filter((u) => u.includes("/tsx/") || u.endsWith(".ts"));

describe("the prebuilt sbx CLI", () => {
  it("is what bin/sbx.mjs runs in this repo: no tsx, no TypeScript source loaded", () => {
    sbx(repo, ["--help"]); // rebuilds first if someone just edited runtime/ in this shared tree
    const r = sbx(repo, ["--help"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("self-hosted code sandboxes");
    const entry = join(repo, "dist/cli", manifestOf(repo).entry);
    expect(r.modules).toContain(pathToFileURL(entry).href);
    expect(fromTypeScript(r.modules)).toEqual([]);
  });

  it("the HTTP path loads none of the packages the in-process runtime needs (zod, pino, prom-client)", () => {
    sbx(repo, ["--help"]);
    // nothing listens on port 1: the call fails to connect, after everything it needs has loaded
    const r = sbx(repo, ["ls"], process.execPath, [join(repo, "bin/sbx.mjs")], {
      SBX_SERVER: "http://127.0.0.1:1",
      SBX_TOKEN: "x",
    });
    expect(r.code, r.stderr).toBe(8); // upstream: the request was made, over the HTTP client
    expect(r.modules.filter((u) => /\/node_modules\/(zod|pino|prom-client|fastify|@kubernetes)\//.test(u))).toEqual([]);
    expect(fromTypeScript(r.modules)).toEqual([]);
  });

  it("the install-time build (npm's prepare) builds it and puts `sbx` in node_modules/.bin", () => {
    const built = spawnSync(process.execPath, [join(copy, "scripts/build-cli.mjs")], {
      cwd: copy,
      encoding: "utf8",
      timeout: 120_000,
    });
    expect(built.status, built.stderr).toBe(0);
    expect(built.stdout).toMatch(
      /^sbx CLI built: dist\/cli\/[0-9a-f]{16}\/sbx\.mjs in \d+ ms; linked node_modules\/\.bin\/sbx\n$/,
    );
    const r = sbx(copy, ["--help"], "sbx", []); // through the PATH, as a user types it
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("self-hosted code sandboxes");
    expect(r.modules).toContain(pathToFileURL(join(copy, "dist/cli", manifestOf(copy).entry)).href);
    expect(fromTypeScript(r.modules)).toEqual([]);
  });

  it("reuses a fresh build without rebuilding, and rebuilds after an edit under runtime/", () => {
    sbx(copy, ["--help"]);
    const before = manifestOf(copy);
    const manifestMtime = statSync(join(copy, "dist/cli/manifest.json")).mtimeMs;
    expect(sbx(copy, ["--help"]).code).toBe(0);
    expect(statSync(join(copy, "dist/cli/manifest.json")).mtimeMs).toBe(manifestMtime);

    const commands = join(copy, "runtime/cli/commands.ts");
    const source = readFileSync(commands, "utf8");
    expect(source).toContain("self-hosted code sandboxes");
    writeFileSync(commands, source.replace("self-hosted code sandboxes", "self-hosted code sandboxes, edited"));
    const r = sbx(copy, ["--help"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("code sandboxes, edited");
    const after = manifestOf(copy);
    expect(after.entry).not.toBe(before.entry);
    expect(r.modules).toContain(pathToFileURL(join(copy, "dist/cli", after.entry)).href);
    expect(fromTypeScript(r.modules)).toEqual([]);
  });

  it("a source edited while the build ran is not trusted: the next call builds again", () => {
    // an mtime inside the build's own time window is what an edit racing esbuild's read looks
    // like; the build's clock is pinned to that instant, so no real timing is involved
    const script = [
      'import { utimesSync } from "node:fs";',
      `import { buildCli, freshCliEntry } from ${JSON.stringify(pathToFileURL(join(copy, "scripts/build-cli.mjs")).href)};`,
      "const during = new Date(Date.UTC(2001, 0, 1));",
      `utimesSync(${JSON.stringify(join(copy, "runtime/cli/args.ts"))}, during, during);`,
      "await buildCli(undefined, { now: () => during.getTime() });",
      "process.stdout.write(JSON.stringify({ fresh: freshCliEntry() ?? null }));",
    ].join("\n");
    const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
      cwd: copy,
      encoding: "utf8",
      timeout: 60_000,
    });
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ fresh: null });
    const manifest = JSON.parse(readFileSync(join(copy, "dist/cli/manifest.json"), "utf8"));
    expect(manifest.inputs["runtime/cli/args.ts"]).toEqual([-1, -1]);
    // once the edit is older than the build, the next build is trusted again
    expect(sbx(copy, ["--help"]).code).toBe(0);
    expect(sbx(copy, ["--help"]).modules.some((u) => u.includes("/esbuild/"))).toBe(false);
  });

  it("falls back to tsx, with the same output, when the build cannot be written", () => {
    const ro = join(work, "read-only");
    cpSync(copy, ro, { recursive: true, verbatimSymlinks: true });
    rmSync(join(ro, "dist"), { recursive: true, force: true });
    writeFileSync(join(ro, "dist"), "a file where the build directory would go\n");
    const r = sbx(ro, ["--help"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("self-hosted code sandboxes");
    expect(r.stderr).toBe(""); // not a terminal: nothing extra for scripts that read stderr
    expect(r.modules.some((u) => u.includes("/tsx/"))).toBe(true);
    expect(r.modules).toContain(pathToFileURL(join(ro, "runtime/cli/main.ts")).href);
    expect(existsSync(join(ro, "dist/cli"))).toBe(false);
  });
});
