// `sbx registry-token-key --dir DIR`: the key pair for snapshots.tokenAuth. Writes key.pem
// (mode 0600) and cert.pem, never over existing files, and prints what goes where: the
// certificate is the registry's rootcertbundle, the key only the runtime's.
import { constants } from "node:fs";
import { mkdir, open } from "node:fs/promises";
import { join } from "node:path";
import { ValidationError } from "../core/errors.ts";
import { tokenKeyPair } from "../snapshot/registryToken.ts";
import { parse } from "./args.ts";
import type { Io } from "./commands.ts";

export async function registryKeyCommand(argv: string[], io: Io, now: Date): Promise<number> {
  const usage = "sbx registry-token-key --dir DIR [--days N] [--json]";
  const a = parse(argv, { dir: { type: "string" }, days: { type: "string" } }, usage);
  if (typeof a.values.dir !== "string" || a.positionals.length)
    throw new ValidationError("registry-token-key", argv.join(" "), `usage: ${usage}`);
  const days = a.values.days === undefined ? 3650 : Number(a.values.days);
  if (!Number.isInteger(days) || days < 1 || days > 36500)
    throw new ValidationError("--days", a.values.days, "give whole days between 1 and 36500 (default 3650)");
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
  io.stdout.write(
    a.values.json
      ? `${JSON.stringify({ keyFile, certFile })}\n`
      : [
          `wrote ${keyFile} (the runtime's only: snapshots.tokenAuth.keyFile)`,
          `wrote ${certFile} (snapshots.tokenAuth.certFile, and the registry's auth.token.rootcertbundle)`,
          "",
        ].join("\n"),
  );
  return 0;
}
