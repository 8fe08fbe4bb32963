// `sbx registry-token-key --dir DIR`: the key pair for snapshots.tokenAuth. Writes key.pem
// (mode 0600) and cert.pem, never over existing files, and prints what goes where: the
// registry's `auth: token` section (the very one the test registries run with), and the
// commands that put the pair into a Pulumi stack. The key is only ever the runtime's.
import { constants } from "node:fs";
import { mkdir, open } from "node:fs/promises";
import { join } from "node:path";
import { TOKEN_AUTH_DEFAULTS, TOKEN_NAME_RE, tokenAuthConfig } from "../config/schema.ts";
import { ValidationError } from "../core/errors.ts";
import { tokenKeyPair } from "../snapshot/registryToken.ts";
import { parse } from "./args.ts";
import type { Io } from "./commands.ts";

// Over 60 lines on purpose: one verb from flags to files to the printed instructions, top to bottom as the operator
// reads its output.
export async function registryKeyCommand(argv: string[], io: Io, now: Date): Promise<number> {
  const usage = "sbx registry-token-key --dir DIR [--days N] [--issuer NAME] [--service NAME] [--json]";
  const a = parse(
    argv,
    { dir: { type: "string" }, days: { type: "string" }, issuer: { type: "string" }, service: { type: "string" } },
    usage,
  );
  if (typeof a.values.dir !== "string" || a.positionals.length)
    throw new ValidationError("registry-token-key", argv.join(" "), `usage: ${usage}`);
  const days = a.values.days === undefined ? 3650 : Number(a.values.days);
  if (!Number.isInteger(days) || days < 1 || days > 36500)
    throw new ValidationError("--days", a.values.days, "give whole days between 1 and 36500 (default 3650)");
  const names = {
    issuer: name("--issuer", a.values.issuer, TOKEN_AUTH_DEFAULTS.issuer),
    service: name("--service", a.values.service, TOKEN_AUTH_DEFAULTS.service),
  };
  const pair = tokenKeyPair({ now, validDays: days });
  const keyFile = join(a.values.dir, "key.pem");
  const certFile = join(a.values.dir, "cert.pem");
  await mkdir(a.values.dir, { recursive: true });
  // O_EXCL: an existing pair stays as it is (a registry may trust it)
  const create = async (path: string, text: string, mode: number) => {
    const f = await open(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, mode).catch((err) => {
      if ((err as NodeJS.ErrnoException).code === "EEXIST")
        throw new ValidationError("--dir", a.values.dir, `${path} already exists; choose an empty directory`);
      throw err;
    });
    try {
      await f.writeFile(text);
    } finally {
      await f.close();
    }
  };
  await create(keyFile, pair.keyPem, 0o600);
  await create(certFile, pair.certPem, 0o644);
  const named = (key: "issuer" | "service") =>
    names[key] === TOKEN_AUTH_DEFAULTS[key]
      ? []
      : [`  pulumi config set --path sbx:snapshots.registryToken.${key} ${JSON.stringify(names[key])}`];
  io.stdout.write(
    a.values.json
      ? `${JSON.stringify({ keyFile, certFile, ...names })}\n`
      : [
          `wrote ${keyFile} (the runtime's only: snapshots.tokenAuth.keyFile)`,
          `wrote ${certFile} (snapshots.tokenAuth.certFile, and the registry's auth.token.rootcertbundle)`,
          "",
          "The registry (distribution's config.yml; rootcertbundle is where the registry finds cert.pem):",
          ...tokenAuthConfig(names, certFile).map((l) => `  ${l}`),
          "",
          "A Pulumi stack (existing-cluster mode, with sbx:snapshots.repositoryUrl and podRegistry):",
          `  pulumi config set --path sbx:snapshots.registryToken.certificate < ${certFile}`,
          `  pulumi config set --secret sbx:registryTokenKey < ${keyFile}`,
          ...named("issuer"),
          ...named("service"),
          "",
          "Or the runtime's own config.json: snapshots.tokenAuth {keyFile, certFile, issuer, service} as above.",
          "",
        ].join("\n"),
  );
  return 0;
}

/** an auth.token name as the stack schema takes it (TOKEN_NAME_RE) */
function name(flag: string, v: unknown, def: string): string {
  if (v === undefined) return def;
  if (typeof v !== "string" || !TOKEN_NAME_RE.test(v))
    throw new ValidationError(flag, v, "give the registry's auth.token value: printable characters, no spaces");
  return v;
}
