// `sbx expose` and `sbx port-forward` (docs/ports.md): both talk to the service itself (they need
// its URL, not only the Manager seam), so they take SBX_SERVER and SBX_TOKEN.
import http from "node:http";
import net from "node:net";
import { type ErrorCode, SbxError, ValidationError } from "../core/errors.ts";
import { need, parse } from "./args.ts";
import type { Io } from "./command.ts";

export interface PortCliEnv {
  env: NodeJS.ProcessEnv;
  io: Io;
}

function server(env: NodeJS.ProcessEnv): { base: string; token: string } {
  if (!env.SBX_SERVER || !env.SBX_TOKEN)
    throw new ValidationError(
      "SBX_SERVER",
      env.SBX_SERVER,
      "expose and port-forward talk to the service: export SBX_SERVER and SBX_TOKEN (what `npm start` printed)",
    );
  return { base: env.SBX_SERVER.replace(/\/+$/, ""), token: env.SBX_TOKEN };
}

function portArg(value: string | undefined, what: string): number {
  const n = Number(value);
  if (!/^\d{1,5}$/.test(value ?? "") || n < 1 || n > 65535)
    throw new ValidationError(what, value, "use a TCP port number from 1 to 65535");
  return n;
}

async function call(env: NodeJS.ProcessEnv, method: string, path: string, body?: unknown) {
  const { base, token } = server(env);
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const json = (await res.json().catch(() => ({}))) as Record<string, unknown>;
  const err = json.error as { code?: ErrorCode; message?: string; details?: Record<string, unknown> } | undefined;
  if (!res.ok)
    throw new SbxError(err?.code ?? "upstream", err?.message ?? `the service answered ${res.status}`, err?.details);
  return json;
}

/** `sbx expose ID PORT [--public] | --close`: prints the URL (and a per-port token, once). */
export async function expose({ env, io }: PortCliEnv, argv: string[]): Promise<number> {
  const usage = "sbx expose ID PORT [--public] [--close] [--json]";
  const a = parse(argv, { public: { type: "boolean" }, close: { type: "boolean" } }, usage);
  need(a.positionals, 2, usage);
  const [id, p] = a.positionals;
  const port = portArg(p, "PORT");
  const path = `/v1/sandboxes/${encodeURIComponent(id)}/exposed-ports/${port}`;
  if (a.values.close) {
    const r = await call(env, "DELETE", path);
    io.stdout.write(a.values.json ? `${JSON.stringify(r)}\n` : `port ${port} of ${id}: owner only\n`);
    return 0;
  }
  const r = await call(env, "PUT", path, { public: a.values.public === true });
  if (a.values.json) io.stdout.write(`${JSON.stringify(r)}\n`);
  else {
    io.stdout.write(`${r.hostUrl ?? r.url}\n`);
    if (r.hostUrl) io.stderr.write(`also: ${r.url}\n`);
    if (r.token)
      io.stderr.write(
        `token (shown once): ${r.token}\n  send it as Authorization: Bearer <token>, or ?sbx_token=<token>\n`,
      );
  }
  return 0;
}

/**
 * `sbx port-forward ID LOCAL:REMOTE`: a listener on this machine's loopback; every connection to
 * it becomes one tunnel through the service (an upgrade to sbx-tcp on the port's path) to REMOTE
 * inside the sandbox. Runs until interrupted (or, for tests, until `signal` aborts).
 */
export async function portForward({ env, io }: PortCliEnv, argv: string[], signal?: AbortSignal): Promise<number> {
  const usage = "sbx port-forward ID LOCAL:REMOTE [--address 127.0.0.1]";
  const a = parse(argv, { address: { type: "string" } }, usage);
  need(a.positionals, 2, usage);
  const [id, spec] = a.positionals;
  const [l, r] = spec.includes(":") ? spec.split(":") : [spec, spec];
  const local = l === "" ? 0 : portArg(l, "LOCAL");
  const remote = portArg(r, "REMOTE");
  const { base, token } = server(env);
  const listener = net.createServer((conn) => tunnel(conn, base, token, id, remote, io));
  const address = typeof a.values.address === "string" ? a.values.address : "127.0.0.1";
  await new Promise<void>((resolve, reject) => {
    listener.once("error", reject);
    listener.listen(local, address, () => resolve());
  });
  const bound = (listener.address() as net.AddressInfo).port;
  io.stdout.write(`Forwarding from ${address}:${bound} -> ${id}:${remote}\n`);
  await new Promise<void>((resolve) => {
    const stop = () => {
      process.off("SIGINT", stop);
      listener.close(() => resolve());
    };
    signal?.addEventListener("abort", stop, { once: true });
    process.once("SIGINT", stop);
  });
  return 0;
}

function tunnel(conn: net.Socket, base: string, token: string, id: string, port: number, io: Io): void {
  conn.on("error", () => conn.destroy());
  conn.pause();
  const url = new URL(`${base}/v1/sandboxes/${encodeURIComponent(id)}/ports/${port}/`);
  const req = http.request(url, {
    headers: { authorization: `Bearer ${token}`, connection: "Upgrade", upgrade: "sbx-tcp" },
  });
  req.on("upgrade", (_res, up, head) => {
    up.on("error", () => conn.destroy());
    if (head.length) conn.write(head);
    up.pipe(conn);
    conn.pipe(up);
    conn.resume();
    conn.on("close", () => up.destroy());
    up.on("close", () => conn.destroy());
  });
  req.on("response", (res) => {
    let text = "";
    res.on("data", (c: Buffer) => (text += c.toString()));
    res.on("end", () => {
      io.stderr.write(`sbx: port-forward to ${id}:${port}: ${res.statusCode} ${text.slice(0, 300)}\n`);
      conn.destroy();
    });
  });
  req.on("error", (err) => {
    io.stderr.write(`sbx: port-forward to ${id}:${port}: ${err.message}\n`);
    conn.destroy();
  });
  req.end();
}
