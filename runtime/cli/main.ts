// `sbx`: the CLI entry. Chooses the transport (SBX_SERVER -> the service over HTTP; else the
// runtime built in-process from config), runs one verb, maps errors to exit codes.
//
// Start-up cost matters (agents call the CLI in loops): the HTTP path loads only our own code
// and Node's built-ins. Config (zod), logging (pino), tokens and the in-process runtime are
// imported when a verb needs them, so `sbx ls` against a service never pays for them.
import { userInfo } from "node:os";
import { pathToFileURL } from "node:url";
import { HttpManager } from "../client/http.ts";
import { EXIT_CODE, SbxError, ValidationError } from "../core/errors.ts";
import type { SandboxManager } from "../core/manager.ts";
import type { Manager } from "../core/types.ts";
import { parse } from "./args.ts";
import { COMMANDS, HELP, type Io } from "./commands.ts";

export interface CliEnv {
  env: NodeJS.ProcessEnv;
  io: Io;
}

/** `sbx token create --owner NAME`: writes only the hash to the tokens file, prints the token once. */
async function tokenCommand(argv: string[], { env, io }: CliEnv): Promise<number> {
  const usage = "sbx token create --owner NAME [--e2b] [--json]";
  const a = parse(argv, { owner: { type: "string" }, e2b: { type: "boolean" } }, usage);
  if (a.positionals[0] !== "create" || typeof a.values.owner !== "string")
    throw new ValidationError("token", argv.join(" "), `usage: ${usage}`);
  const [{ loadRuntimeConfig, tokensPathFor }, { addToken, generateE2bKey, generateToken }] = await Promise.all([
    import("../config/load.ts"),
    import("../core/tokens.ts"),
  ]);
  const { config } = loadRuntimeConfig(env);
  const path = tokensPathFor(config);
  // --e2b: E2B's key shape (e2b_<hex>) for X-API-KEY; stored and checked like any other token
  const token = addToken(path, a.values.owner, a.values.e2b ? generateE2bKey : generateToken);
  io.stdout.write(
    a.values.json ? `${JSON.stringify({ owner: a.values.owner, token, tokensPath: path })}\n` : `${token}\n`,
  );
  return 0;
}

async function openManager(
  env: NodeJS.ProcessEnv,
): Promise<{ manager: Manager; owner: string; close: () => Promise<void> }> {
  if (env.SBX_SERVER) {
    if (!env.SBX_TOKEN)
      throw new SbxError(
        "unauthenticated",
        "SBX_SERVER is set but SBX_TOKEN is not: export the token `npm start` printed",
      );
    return {
      manager: new HttpManager({ server: env.SBX_SERVER, token: env.SBX_TOKEN }),
      owner: "(token)",
      close: async () => {},
    };
  }
  const { loadRuntimeConfig } = await import("../config/load.ts");
  const { config } = loadRuntimeConfig(env);
  // Local sandboxes live inside the process that started them: a CLI process would kill its
  // sandboxes when it exits, and its backend would fight the running service over the state dir.
  // So this is a missing setting, not a failed login: exit 2 (invalid arguments), naming it.
  if (config.platform === "local") {
    throw new SbxError(
      "validation",
      "SBX_SERVER is not set: export SBX_SERVER=http://host:port and SBX_TOKEN, the URL and token `npm start` printed (the local platform runs sandboxes inside the service; start it with `npm start` if it is not running)",
      { field: "SBX_SERVER" },
    );
  }
  const [{ buildManager }, { createLogger }, { systemClock }] = await Promise.all([
    import("../backends.ts"),
    import("../core/log.ts"),
    import("../core/clock.ts"),
  ]);
  const logger = createLogger({ level: env.SBX_LOG_LEVEL ?? "warn" });
  const { manager } = await buildManager(config, { logger, clock: systemClock });
  await (manager as SandboxManager).start({ reaper: false });
  const owner = env.SBX_OWNER ?? userInfo().username;
  return { manager, owner, close: () => (manager as SandboxManager).close() };
}

export async function runCli(argv: string[], cli: CliEnv): Promise<number> {
  const [verb, ...rest] = argv;
  if (!verb || verb === "help" || verb === "--help" || verb === "-h") {
    cli.io.stdout.write(HELP);
    return verb ? 0 : 2;
  }
  const json = rest.includes("--json");
  try {
    if (verb === "token") return await tokenCommand(rest, cli);
    if (verb === "whoami") return await (await import("./whoami.ts")).whoami(cli, rest);
    if (verb === "registry-token-key")
      return await (await import("./registryKey.ts")).registryKeyCommand(rest, cli.io, new Date());
    if (verb === "expose" || verb === "port-forward") {
      const ports = await import("./ports.ts");
      return await (verb === "expose" ? ports.expose(cli, rest) : ports.portForward(cli, rest));
    }
    const command = COMMANDS[verb];
    if (!command)
      throw new ValidationError(
        "command",
        verb,
        `unknown command; run \`sbx help\` (commands: ${Object.keys(COMMANDS).join(", ")})`,
      );
    if (rest.includes("--help") || rest.includes("-h")) {
      cli.io.stdout.write(HELP);
      return 0;
    }
    const { manager, owner, close } = await openManager(cli.env);
    try {
      return await command({ manager, owner, io: cli.io }, rest);
    } finally {
      await close();
    }
  } catch (err) {
    const code = err instanceof SbxError ? err.code : "internal";
    const message = err instanceof Error ? err.message : String(err);
    if (json)
      cli.io.stderr.write(
        `${JSON.stringify({ error: { code, message, ...(err instanceof SbxError ? { details: err.details } : {}) } })}\n`,
      );
    else cli.io.stderr.write(`sbx: ${message}\n`);
    if (err instanceof SbxError && err.code === "capacity")
      cli.io.stderr.write(`sbx: retry after ${(err.details.retryAfterSeconds as number) ?? "a few"}s\n`);
    return err instanceof SbxError ? EXIT_CODE[err.code] : 1;
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const code = await runCli(process.argv.slice(2), {
    env: process.env,
    io: { stdout: process.stdout, stderr: process.stderr, stdin: process.stdin },
  });
  // let stdout drain before exiting (pipes are asynchronous)
  process.stdout.write("", () => process.exit(code));
}
