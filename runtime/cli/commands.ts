// The CLI's verbs, each a function over the Manager seam, so the same code runs against the
// service (HttpManager) and in-process (SandboxManager). Human output by default, --json for
// scripts; the return value is the process exit code.
import { finished } from "node:stream/promises";
import { SbxError, ValidationError } from "../core/errors.ts";
import type { Sandbox } from "../core/types.ts";
import { durationFlag, intFlag, keyValues, need, parse } from "./args.ts";
import { bench } from "./bench.ts";
import { type Command, type CommandContext, print, table } from "./command.ts";
import { copyIn, copyOut } from "./copy.ts";
import { ProgressDisplay } from "./progress.ts";
import { shell } from "./shell.ts";
import { stats, top } from "./top.ts";
import { usage } from "./usage.ts";

export type { CommandContext, Io } from "./command.ts";

function age(iso: string | undefined, now = Date.now()): string {
  if (!iso) return "-";
  const s = Math.round((now - Date.parse(iso)) / 1000);
  const abs = Math.abs(s);
  const txt = abs < 120 ? `${abs}s` : abs < 7200 ? `${Math.round(abs / 60)}m` : `${Math.round(abs / 3600)}h`;
  return s < 0 ? `in ${txt}` : txt;
}

function describeHuman(s: Sandbox): string {
  const lines = [
    ["id", s.id],
    ["phase", s.phase + (s.reason ? ` (${s.reason})` : "")],
    ["ready", String(s.ready)],
    ["profile", s.profile],
    ["size", s.size],
    ["created", s.createdAt],
    ["expires", s.expiresAt],
    ["last activity", s.lastActivityAt ?? "-"],
    ["warm", String(s.warm ?? false)],
    ["node", s.node ?? "-"],
  ];
  if (s.message) lines.push(["message", s.message]);
  if (s.exitCode !== undefined) lines.push(["exit code", String(s.exitCode)]);
  return table(lines);
}

const create: Command = async (ctx, argv) => {
  const usage =
    "sbx create [--profile P] [--size S] [--ttl 1h] [--idle 15m] [--env K=V]... [--meta K=V]... [--key KEY] [--auto-pause JSON] [--wait [--timeout 60s]] [--json]";
  const a = parse(
    argv,
    {
      profile: { type: "string" },
      size: { type: "string" },
      ttl: { type: "string" },
      idle: { type: "string" },
      env: { type: "string", multiple: true },
      meta: { type: "string", multiple: true },
      key: { type: "string" },
      wait: { type: "boolean" },
      timeout: { type: "string" },
      "auto-pause": { type: "string" },
    },
    usage,
  );
  let autoPause: Record<string, unknown> | undefined;
  if (a.values["auto-pause"] !== undefined) {
    try {
      autoPause = JSON.parse(a.values["auto-pause"] as string);
    } catch (e) {
      throw new ValidationError(
        "--auto-pause",
        a.values["auto-pause"],
        `must be a JSON policy object: ${(e as Error).message}`,
      );
    }
  }
  let s = await ctx.manager.create({
    owner: ctx.owner,
    profile: a.values.profile as string,
    size: a.values.size as string,
    ttlSeconds: durationFlag("--ttl", a.values.ttl),
    idleTimeoutSeconds: durationFlag("--idle", a.values.idle),
    env: keyValues("--env", a.values.env),
    metadata: keyValues("--meta", a.values.meta),
    clientKey: a.values.key as string | undefined,
    autoPause,
  });
  if (a.values.wait)
    s = await ctx.manager.wait(ctx.owner, s.id, {
      timeoutMs: (durationFlag("--timeout", a.values.timeout) ?? 60) * 1000,
    });
  print(ctx, !!a.values.json, s, s.id);
  return 0;
};

const wait: Command = async (ctx, argv) => {
  const usage = "sbx wait ID [--timeout 60s] [--json]";
  const a = parse(argv, { timeout: { type: "string" } }, usage);
  need(a.positionals, 1, usage);
  const s = await ctx.manager.wait(ctx.owner, a.positionals[0], {
    timeoutMs: (durationFlag("--timeout", a.values.timeout) ?? 60) * 1000,
  });
  print(ctx, !!a.values.json, s, `${s.id} ready`);
  return 0;
};

const run: Command = async (ctx, argv) => {
  const usage = "sbx run ID [--env K=V]... [--cwd DIR] [--timeout 30s] [--stdin] [--json] -- COMMAND [ARGS...]";
  const a = parse(
    argv,
    {
      env: { type: "string", multiple: true },
      cwd: { type: "string" },
      timeout: { type: "string" },
      stdin: { type: "boolean", short: "i" },
    },
    usage,
  );
  need(a.positionals, 1, usage);
  // `sbx run ID cmd args` works too; `--` is needed only when the command has its own flags
  const command = a.rest.length > 0 ? a.rest : a.positionals.slice(1);
  if (command.length === 0) throw new ValidationError("command", "", `nothing to run; usage: ${usage}`);
  const timeout = durationFlag("--timeout", a.values.timeout);
  const session = await ctx.manager.exec(ctx.owner, a.positionals[0], {
    command,
    env: keyValues("--env", a.values.env),
    cwd: a.values.cwd as string | undefined,
    timeoutMs: timeout === undefined ? undefined : timeout * 1000,
    stdin: a.values.stdin ? ctx.io.stdin : undefined,
  });
  const json = !!a.values.json;
  const out: { stdout: Buffer[]; stderr: Buffer[] } = { stdout: [], stderr: [] };
  session.stdout.on("data", (c: Buffer) => (json ? out.stdout.push(Buffer.from(c)) : ctx.io.stdout.write(c)));
  session.stderr.on("data", (c: Buffer) => (json ? out.stderr.push(Buffer.from(c)) : ctx.io.stderr.write(c)));
  const [result] = await Promise.all([session.result, finished(session.stdout), finished(session.stderr)]);
  if (json)
    print(
      ctx,
      true,
      { ...result, stdout: Buffer.concat(out.stdout).toString(), stderr: Buffer.concat(out.stderr).toString() },
      "",
    );
  else if (result.timedOut) ctx.io.stderr.write(`sbx: command timed out after ${timeout}s (exit ${result.exitCode})\n`);
  else if (result.oomKilled) ctx.io.stderr.write(`sbx: command was OOM-killed (exit ${result.exitCode})\n`);
  return result.exitCode;
};

/** "ID:/path" -> { id, path }; anything else is local. */
function remote(arg: string): { id: string; path: string } | undefined {
  const m = /^([a-z0-9][a-z0-9-]*):(\/.*)$/.exec(arg);
  return m ? { id: m[1], path: m[2] } : undefined;
}

const cp: Command = async (ctx, argv) => {
  const usage = "sbx cp LOCAL_PATH ID:/dir  |  sbx cp ID:/path LOCAL_DIR";
  const a = parse(argv, {}, usage);
  need(a.positionals, 2, usage);
  const [src, dst] = a.positionals;
  const from = remote(src);
  const to = remote(dst);
  if (!from && to) {
    const local = await copyIn(ctx.manager, ctx.owner, src, to.id, to.path);
    print(ctx, !!a.values.json, { copied: local, to: dst }, `${local} -> ${dst}`);
    return 0;
  }
  if (from && !to) {
    const dir = await copyOut(ctx.manager, ctx.owner, from.id, from.path, dst);
    print(ctx, !!a.values.json, { copied: src, to: dir }, `${src} -> ${dir}`);
    return 0;
  }
  throw new ValidationError("cp", `${src} ${dst}`, `exactly one side must be ID:/path; usage: ${usage}`);
};

const ls: Command = async (ctx, argv) => {
  const a = parse(argv, {}, "sbx ls [--json]");
  const all = await ctx.manager.list({ owner: ctx.owner });
  const rows = [
    ["ID", "PHASE", "READY", "PROFILE", "SIZE", "AGE", "EXPIRES"],
    ...all.map((s) => [
      s.id,
      s.phase + (s.reason ? `/${s.reason}` : ""),
      String(s.ready),
      s.profile,
      s.size,
      age(s.createdAt),
      age(s.expiresAt),
    ]),
  ];
  print(ctx, !!a.values.json, all, all.length ? table(rows) : "no sandboxes");
  return 0;
};

const get: Command = async (ctx, argv) => {
  const usage = "sbx get ID [--json]";
  const a = parse(argv, {}, usage);
  need(a.positionals, 1, usage);
  const s = await ctx.manager.get(ctx.owner, a.positionals[0]);
  print(ctx, !!a.values.json, s, describeHuman(s));
  return 0;
};

const logs: Command = async (ctx, argv) => {
  const usage = "sbx logs ID [--follow] [--tail N]";
  const a = parse(argv, { follow: { type: "boolean", short: "f" }, tail: { type: "string" } }, usage);
  need(a.positionals, 1, usage);
  const stream = await ctx.manager.logs(ctx.owner, a.positionals[0], {
    follow: !!a.values.follow,
    tailLines: intFlag("--tail", a.values.tail),
  });
  stream.pipe(ctx.io.stdout, { end: false });
  await finished(stream);
  return 0;
};

const kill: Command = async (ctx, argv) => {
  const usage = "sbx kill ID [ID...]";
  const a = parse(argv, {}, usage);
  need(a.positionals, 1, usage);
  for (const id of a.positionals) await ctx.manager.kill(ctx.owner, id);
  print(ctx, !!a.values.json, { killed: a.positionals }, a.positionals.map((id) => `${id} killed`).join("\n"));
  return 0;
};

/** Progress on stderr: asked for with --progress, or by default on a terminal unless --json. */
function showProgress(ctx: CommandContext, asked: boolean, json: boolean): boolean {
  return asked || (!json && (ctx.io.stderr as { isTTY?: boolean }).isTTY === true);
}

const pauseResume =
  (verb: "pause" | "resume"): Command =>
  async (ctx, argv) => {
    const usage = `sbx ${verb} ID [--progress] [--json]`;
    const a = parse(argv, { progress: { type: "boolean" } }, usage);
    need(a.positionals, 1, usage);
    const fn = ctx.manager[verb];
    if (!fn) throw new SbxError("conflict", `${verb} is not supported here`);
    const id = a.positionals[0];
    const json = !!a.values.json;
    const display = showProgress(ctx, !!a.values.progress, json)
      ? new ProgressDisplay({
          verb,
          id,
          out: ctx.io.stderr,
          tty: (ctx.io.stderr as { isTTY?: boolean }).isTTY === true,
        })
      : undefined;
    let s: Sandbox;
    try {
      s = await fn.call(ctx.manager, ctx.owner, id, display ? { onProgress: display.onProgress } : {});
    } catch (err) {
      display?.clear();
      throw err;
    }
    display?.done();
    print(ctx, json, s, `${s.id} ${s.phase}`);
    return 0;
  };

const pool: Command = async (ctx, argv) => {
  const usage = "sbx pool status [--json]";
  const a = parse(argv, {}, usage);
  if (a.positionals[0] !== "status") throw new ValidationError("pool", a.positionals[0] ?? "", `usage: ${usage}`);
  if (!ctx.manager.poolStatus) throw new SbxError("conflict", "this backend has no warm pool");
  const pools = await ctx.manager.poolStatus();
  const rows = [
    ["PROFILE", "SIZE", "TARGET", "READY", "STARTING"],
    ...pools.map((p) => [p.profile, p.size, String(p.target), String(p.ready), String(p.starting)]),
  ];
  print(ctx, !!a.values.json, pools, pools.length ? table(rows) : "no warm pools configured");
  return 0;
};

export const COMMANDS: Record<string, Command> = {
  create,
  wait,
  run,
  exec: run,
  shell,
  cp,
  ls,
  list: ls,
  get,
  logs,
  kill,
  rm: kill,
  pause: pauseResume("pause"),
  resume: pauseResume("resume"),
  pool,
  usage,
  stats,
  top,
  bench,
};

export const HELP = `sbx: self-hosted code sandboxes

usage: sbx <command> [options]

  create [--profile P] [--size S] [--ttl 1h] [--idle 15m] [--env K=V] [--key KEY] [--wait]
                                   create a sandbox; prints its id at once
  wait ID [--timeout 60s]          block until it accepts commands
  run ID [--timeout 30s] [--stdin] -- CMD [ARGS...]
                                   run a command; output streams; exits with its exit code
  shell ID [--env K=V] [--cwd DIR] [-- CMD [ARGS...]]
                                   an interactive terminal (default the login shell): raw mode,
                                   resizes follow; exits with its code; ~. at a line start quits
  cp LOCAL ID:/dir | ID:/path LOCAL copy files in or out (tar)
  ls                               your sandboxes
  get ID                           one sandbox
  logs ID [--follow] [--tail N]    the sandbox's own output
  kill ID [ID...]                  kill sandboxes
  pause ID | resume ID [--progress]
                                   snapshot and release / restore (where supported); progress
                                   on stderr on a terminal, or anywhere with --progress
  pool status                      warm pool state
  usage                            your team's sandboxes, CPU and memory against its limits
  stats ID [--since 10m] [--history]
                                   its CPU, memory, pids and /workspace against its limits
  top [--interval 2s] [--once]     all your sandboxes' figures, redrawn in place on a terminal
  bench create [--count N] [--concurrency C]
                                   measure create-accept latency
  expose ID PORT [--public] | expose ID PORT --close
                                   open a port to others (a per-port token, shown once, or
                                   public) and print its URL; --close: owner only again
  port-forward ID LOCAL:REMOTE     listen on loopback LOCAL, relay each connection to REMOTE
  whoami                           the owner and team SBX_TOKEN (a token or a JWT) maps to
  token create --owner NAME        add a token to the service's tokens file (direct mode)
                                   (--e2b: in E2B's key shape e2b_<hex>, for E2B_API_KEY)
  registry-token-key --dir DIR     a key pair for snapshots.tokenAuth: the runtime signs its
                                   registry's tokens, one per sandbox for its own layers;
                                   prints the registry's auth section and the stack commands
                                   ([--issuer NAME] [--service NAME] [--days N])

Every command takes --json. With SBX_SERVER (and SBX_TOKEN) set it talks to the service;
otherwise, for platform kubernetes in SBX_CONFIG, it drives the cluster in-process through the
kubeconfig (the local platform always needs the service: npm start).
Exit codes: 0 ok, 1 command failed, 2 invalid arguments, 3 unauthenticated, 4 not found,
5 conflict, 6 over capacity, 7 timeout, 8 upstream, 9 sandbox failed, 10 too large;
run/exec/shell exit with the command's own exit code (shell: 255 after ~.).
`;
