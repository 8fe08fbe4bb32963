// Where scripts/build-pulumi.sh put the engine, and a clear error when it is not there. The
// versions come from the same files the script reads, so the two cannot disagree.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const BUILD_SCRIPT = "scripts/build-pulumi.sh";

export interface EngineLocation {
  /** PulumiCommand root: holds bin/pulumi */
  root: string;
  /** the plugins folder the engine reads (resource-kubernetes-v<version>/) */
  pluginsDir: string;
  /** the CLI version the Automation API must find, e.g. "3.248.0" */
  cliVersion: string;
  /** the provider plugin version @pulumi/kubernetes asks for, e.g. "4.34.2" */
  providerVersion: string;
}

/** The engine is missing or incomplete; the message says how to build it. */
export class EngineMissingError extends Error {
  constructor(missing: string) {
    super(
      `Pulumi engine: ${missing} is missing. Build it with \`bash ${BUILD_SCRIPT}\` ` +
        "(cold ~20 minutes on 2 cores, then cached; see docs/deploy.md), or point SBX_PULUMI_DIR at a built engine.",
    );
    this.name = "EngineMissingError";
  }
}

export function cliVersion(repo = REPO): string {
  const gomod = readFileSync(join(repo, "tools/pulumi/cli/go.mod"), "utf8");
  const v = /github\.com\/pulumi\/pulumi\/pkg\/v3 v([0-9][^\s]*)/.exec(gomod)?.[1];
  if (!v) throw new Error("Pulumi engine: no github.com/pulumi/pulumi/pkg/v3 version in tools/pulumi/cli/go.mod");
  return v;
}

export function providerVersion(repo = REPO): string {
  const pkg = JSON.parse(readFileSync(join(repo, "node_modules/@pulumi/kubernetes/package.json"), "utf8"));
  const v = pkg?.pulumi?.version;
  if (typeof v !== "string") throw new Error("Pulumi engine: @pulumi/kubernetes/package.json has no pulumi.version");
  return v;
}

/** The built engine, checked file by file; `dir` defaults to SBX_PULUMI_DIR, then the repo cache. */
export function locateEngine(dir?: string, repo = REPO): EngineLocation {
  const cli = cliVersion(repo);
  const provider = providerVersion(repo);
  const root = resolve(dir ?? process.env.SBX_PULUMI_DIR ?? join(repo, ".cache/pulumi", `v${cli}`));
  const pluginsDir = join(root, "home/plugins");
  const binaries = [
    join(root, "bin/pulumi"),
    join(pluginsDir, `resource-kubernetes-v${provider}`, "pulumi-resource-kubernetes"),
  ];
  for (const b of binaries) if (!existsSync(b)) throw new EngineMissingError(b);
  return { root, pluginsDir, cliVersion: cli, providerVersion: provider };
}
