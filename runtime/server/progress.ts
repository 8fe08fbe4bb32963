// Streaming pause and resume: with `Accept: application/x-ndjson` or `?progress=true` the
// answer is NDJSON: {"progress":{op,path,bytes,totalBytes?}} frames, at most one per path per
// interval, then one {"sandbox":...} or {"error":{code,message}} frame. A failure before any
// byte moved (404, 409, 429 over budget) is still an ordinary error response with its status.
// A client that goes away does not stop the operation: a pause or resume cut halfway would
// only have to be undone, so it finishes and the sandbox's phase tells the outcome.
import { PassThrough } from "node:stream";
import type { FastifyReply } from "fastify";
import { SbxError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Sandbox, TransferOptions, TransferProgress } from "../core/types.ts";

export const NDJSON = "application/x-ndjson";

/** "?progress=true|1" asks for the stream, "false|0" refuses it; otherwise the Accept header decides. */
export function shouldStreamProgress(query: { progress?: string } | undefined, accept: string | undefined): boolean {
  const q = query?.progress;
  if (q !== undefined) return q === "true" || q === "1";
  return prefersNdjson(accept);
}

/** True when Accept ranks application/x-ndjson above (or equal to) application/json. */
export function prefersNdjson(accept: string | undefined): boolean {
  if (!accept) return false;
  let ndjson = 0;
  let json = 0;
  for (const part of accept.split(",")) {
    const [type, ...params] = part.split(";").map((x) => x.trim().toLowerCase());
    const qp = params.find((p) => p.startsWith("q="));
    const q = qp === undefined ? 1 : Number(qp.slice(2));
    if (!Number.isFinite(q)) continue;
    if (type === NDJSON) ndjson = Math.max(ndjson, q);
    else if (type === "application/json") json = Math.max(json, q);
  }
  return ndjson > 0 && ndjson >= json;
}

/**
 * Keeps the latest progress per path and hands it out at most once per interval, so a fast
 * transfer (a callback per chunk) becomes a few frames a second. The clock is injected.
 */
export class ProgressThrottle {
  private readonly pending = new Map<string, TransferProgress>();
  private last = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly intervalMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  note(p: TransferProgress): void {
    this.pending.set(p.path, p);
  }

  /** The latest progress of every path that moved, when the interval has passed; else nothing. */
  due(): TransferProgress[] {
    const t = this.now();
    if (this.pending.size === 0 || t - this.last < this.intervalMs) return [];
    this.last = t;
    return this.flush();
  }

  /** Everything not yet handed out (before the final frame, so the last bytes are shown). */
  flush(): TransferProgress[] {
    const out = [...this.pending.values()];
    this.pending.clear();
    return out;
  }
}

export interface ProgressStreamOptions {
  intervalMs: number;
  now?: () => number;
  log: Logger;
}

/**
 * Runs a pause or resume and answers with progress frames. Headers are sent once the first
 * byte moved (or the operation ended), so an early failure keeps its own status code.
 */
export async function respondWithProgress(
  run: (opts: TransferOptions) => Promise<Sandbox>,
  reply: FastifyReply,
  opts: ProgressStreamOptions,
): Promise<FastifyReply> {
  const throttle = new ProgressThrottle(opts.intervalMs, opts.now);
  let out: PassThrough | undefined;
  let clientGone = false;
  const write = (frame: unknown) => {
    if (out && !clientGone) out.write(`${JSON.stringify(frame)}\n`);
  };
  let firstByte!: () => void;
  const moved = new Promise<"moved">((resolve) => (firstByte = () => resolve("moved")));
  const op = run({
    onProgress: (p) => {
      throttle.note(p);
      if (!out) firstByte();
      else for (const f of throttle.due()) write({ progress: f });
    },
  });
  const first = await Promise.race([moved, op.then(() => "ended" as const)]); // rejects: a plain error answer
  out = new PassThrough();
  if (first === "moved") for (const f of throttle.due()) write({ progress: f });
  reply.raw.on("close", () => {
    if (!reply.raw.writableFinished && !clientGone) {
      clientGone = true;
      opts.log.info(
        { op: "progress" },
        "client went away; the operation continues and its outcome shows in the sandbox's phase",
      );
    }
  });
  void op
    .then(
      (sandbox) => {
        for (const f of throttle.flush()) write({ progress: f });
        write({ sandbox });
      },
      (err: unknown) => {
        for (const f of throttle.flush()) write({ progress: f });
        write({ error: errorFrame(err, opts.log) });
      },
    )
    .finally(() => out!.end());
  return reply.code(200).header("content-type", NDJSON).header("cache-control", "no-store").send(out);
}

function errorFrame(err: unknown, log: Logger): { code: string; message: string; details?: Record<string, unknown> } {
  if (err instanceof SbxError)
    return {
      code: err.code,
      message: err.message,
      ...(Object.keys(err.details).length ? { details: err.details } : {}),
    };
  log.error({ err, op: "progress" }, "pause/resume failed mid-stream");
  return { code: "internal", message: "internal error; the service logged the details" };
}
