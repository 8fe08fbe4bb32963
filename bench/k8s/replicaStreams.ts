// What the streaming scenario of bench/k8s/replicas.ts does to and reads from the replica
// processes of a fleet (bench/k8s/replicaFleet.ts): wait and streaming exec over the HTTP API
// as an agent's client would, each replica's /metrics, and its RSS from /proc next to the
// machine's load average, sampled while the scenario runs.
import { readFileSync } from "node:fs";
import { type RequestOptions, request } from "node:https";
import { loadavg } from "node:os";
import { performance } from "node:perf_hooks";
import type { KubeClients } from "../../runtime/k8s/client.ts";
import { ExecFrameTally } from "../lib/execFrames.ts";
import { FLEET_TOKEN, type Replica } from "./replicaFleet.ts";

const HEADERS = { authorization: `Bearer ${FLEET_TOKEN}`, "content-type": "application/json" };

/** `POST /v1/sandboxes/:id/wait` through a replica: its status (0: the request itself failed). */
export async function waitVia(r: Replica, id: string, timeoutSeconds: number): Promise<number> {
  try {
    const res = await fetch(`${r.url}/v1/sandboxes/${id}/wait`, {
      method: "POST",
      headers: HEADERS,
      body: JSON.stringify({ timeoutSeconds }),
    });
    await res.arrayBuffer();
    return res.status;
  } catch {
    return 0;
  }
}

export interface StreamedExec {
  tally: ExecFrameTally;
  /** performance.now() when the request was sent */
  startedAt: number;
  endedAt: number;
}

/**
 * One exec over `POST /v1/sandboxes/:id/exec`, read to the end of its NDJSON body. A refusal or
 * a broken connection becomes the tally's error; it never throws, so hundreds can run at once
 * under Promise.all without one failure hiding the others' outcomes.
 */
export async function streamExecVia(
  r: Replica,
  id: string,
  body: { command: string[]; timeoutMs?: number },
  signal?: AbortSignal,
  tally = new ExecFrameTally(), // the caller's, to watch it while the exec streams
): Promise<StreamedExec> {
  const startedAt = performance.now();
  try {
    const res = await fetch(`${r.url}/v1/sandboxes/${id}/exec`, {
      method: "POST",
      headers: HEADERS,
      body: JSON.stringify(body),
      signal,
    });
    if (res.status !== 200 || !res.body) {
      const json = (await res.json().catch(() => ({}))) as { error?: { code: string; message: string } };
      tally.error = json.error ?? { code: `http ${res.status}`, message: "" };
    } else {
      for await (const chunk of res.body) tally.feed(chunk, performance.now());
    }
  } catch (err) {
    tally.error ??= {
      code: (err as Error).name === "AbortError" ? "client deadline" : "network",
      message: String(err),
    };
  }
  return { tally, startedAt, endedAt: performance.now() };
}

/** A replica's /metrics text ("" when it cannot be read: a dead replica is not an exception here). */
export async function scrape(r: Replica): Promise<string> {
  try {
    return await (await fetch(`${r.url}/metrics`)).text();
  } catch {
    return "";
  }
}

/** A process's resident set in MiB (VmRSS), or undefined once it is gone. */
export function rssMiB(pid: number): number | undefined {
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Math.round(Number(m[1]) / 1024) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A process's CPU time so far (user + system), seconds, from /proc/<pid>/stat (clock ticks of
 * 1/100 s, Linux's USER_HZ on every architecture we run on); undefined once it is gone.
 */
export function cpuSeconds(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // the fields after the command name, which is in parentheses and may hold spaces
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return undefined;
  }
}

export interface MachineSample {
  /** per replica, in the fleet's order */
  peakRssMiB: (number | null)[];
  load1: { first: number; max: number; last: number };
}

/** Samples each replica's RSS and the 1-minute load average every `everyMs` until stopped. */
export function sampleMachine(rs: readonly Replica[], everyMs = 1000): { stop(): MachineSample } {
  const peak: (number | null)[] = rs.map(() => null);
  const first = loadavg()[0];
  let max = first;
  const tick = () => {
    rs.forEach((r, i) => {
      const v = rssMiB(r.pid);
      if (v !== undefined) peak[i] = Math.max(peak[i] ?? 0, v);
    });
    max = Math.max(max, loadavg()[0]);
  };
  tick();
  const timer = setInterval(tick, everyMs);
  return {
    stop: () => {
      clearInterval(timer);
      tick();
      return { peakRssMiB: peak, load1: { first: round1(first), max: round1(max), last: round1(loadavg()[0]) } };
    },
  };
}

const round1 = (x: number) => Math.round(x * 10) / 10;

/**
 * The API server's own count of Lease writes by response code (`apiserver_request_total`, verb
 * PUT, resource leases): 409s are compare-and-swap losses, e.g. of the budget shares Lease.
 * Empty when /metrics cannot be read.
 */
export async function leasePutsByCode(admin: KubeClients): Promise<Record<string, number>> {
  const server = new URL(admin.kc.getCurrentCluster()?.server ?? "https://127.0.0.1");
  const opts: RequestOptions = { hostname: server.hostname, port: server.port, path: "/metrics", method: "GET" };
  await admin.kc.applyToHTTPSOptions(opts);
  const text = await new Promise<string>((resolve) => {
    const req = request(opts, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.on("end", () => resolve(body));
      res.on("error", () => resolve(""));
    });
    req.on("error", () => resolve(""));
    req.end();
  });
  const out: Record<string, number> = {};
  for (const line of text.split("\n")) {
    if (
      !line.startsWith("apiserver_request_total{") ||
      !line.includes('resource="leases"') ||
      !line.includes('verb="PUT"')
    )
      continue;
    const code = /code="(\d+)"/.exec(line)?.[1] ?? "?";
    out[code] = (out[code] ?? 0) + Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return out;
}
