// `sbx whoami`: asks the service who SBX_TOKEN makes the caller (GET /v1/whoami): the owner and
// team a static token or a JWT (an IdP's, a Kubernetes service account's) maps to. Only the
// service can say: the mapping is its config, and a JWT is checked against its issuers.
import { HttpManager } from "../client/http.ts";
import { ValidationError } from "../core/errors.ts";
import { parse } from "./args.ts";
import type { Io } from "./command.ts";
import { table } from "./command.ts";

export async function whoami({ env, io }: { env: NodeJS.ProcessEnv; io: Io }, argv: string[]): Promise<number> {
  const a = parse(argv, {}, "sbx whoami [--json]");
  if (!env.SBX_SERVER || !env.SBX_TOKEN)
    throw new ValidationError(
      "SBX_SERVER",
      env.SBX_SERVER,
      "whoami asks the service: export SBX_SERVER and SBX_TOKEN (a token from the tokens file, or a JWT from a configured issuer)",
    );
  const me = await new HttpManager({ server: env.SBX_SERVER, token: env.SBX_TOKEN }).whoami();
  if (a.values.json) {
    io.stdout.write(`${JSON.stringify(me, null, 2)}\n`);
    return 0;
  }
  const rows = [
    ["owner", me.owner],
    ["team", me.team ?? "-"],
    ["via", me.via === "token" ? "token (the tokens file)" : `issuer ${me.via}`],
  ];
  if (me.expiresAt) rows.push(["expires", me.expiresAt]);
  io.stdout.write(`${table(rows)}\n`);
  return 0;
}
