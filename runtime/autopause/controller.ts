// Runs the automatic pause/wake policy: executes due probes in running sandboxes, asks the pure
// decideAutoPause what to do, does it (pause, resume, kill) and publishes the status (probe
// results, nextPauseTime, nextResumeTime). Time comes from the injected Clock; tests call
// tick() after advancing a ManualClock.
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { finished } from "node:stream/promises";
import type { Clock } from "../core/clock.ts";
import { ValidationError } from "../core/errors.ts";
import { readJsonIfExists, writeJsonAtomic } from "../core/jsonFile.ts";
import type { Logger } from "../core/log.ts";
import type { Backend, ExecSession, Sandbox } from "../core/types.ts";
import { type Decision, decideAutoPause } from "./decide.ts";
import { applyProbeOutcome, dueProbes, type ProbeStatus } from "./probe.ts";
import type { AutoPausePolicy, ProbeSpec } from "./spec.ts";

export interface AutoPauseStatus {
  probes: Record<string, ProbeStatus>;
  nextPauseTime?: string;
  nextPauseReason?: string;
  /** persisted: the wake trigger while paused */
  nextResumeTime?: string;
  resumedAt?: string;
  lastAction?: { action: string; reason?: string; at: string; error?: string };
}

/** Kubernetes: Sandbox status (probes, nextPauseTime, nextResumeTime); local: a file. */
export interface AutoPauseStatusStore {
  get(id: string): Promise<AutoPauseStatus | undefined>;
  put(id: string, status: AutoPauseStatus): Promise<void>;
  delete(id: string): Promise<void>;
}

export class MemoryStatusStore implements AutoPauseStatusStore {
  private readonly m = new Map<string, AutoPauseStatus>();
  async get(id: string) {
    return this.m.get(id);
  }
  async put(id: string, s: AutoPauseStatus) {
    this.m.set(id, structuredClone(s));
  }
  async delete(id: string) {
    this.m.delete(id);
  }
}

/** One JSON file per sandbox (local platform): nextResumeTime must survive a restart or a paused sandbox never wakes. */
export class FileStatusStore implements AutoPauseStatusStore {
  constructor(private readonly dir: string) {}
  private file(id: string): string {
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(id))
      throw new ValidationError("sandbox id", id, "use letters, digits, '.', '_' or '-' (at most 128)");
    return join(this.dir, `${id}.autopause.json`);
  }
  get(id: string): Promise<AutoPauseStatus | undefined> {
    return readJsonIfExists<AutoPauseStatus>(this.file(id));
  }
  async put(id: string, status: AutoPauseStatus): Promise<void> {
    await writeJsonAtomic(this.dir, this.file(id), status);
  }
  async delete(id: string): Promise<void> {
    await rm(this.file(id), { force: true });
  }
}

export interface AutoPauseControllerOptions {
  clock: Clock;
  logger: Logger;
  /** runs probes; pass the raw backend so a probe never wakes a paused sandbox or counts as activity */
  probeBackend: Pick<Backend, "exec">;
  /** sandboxes that have a policy, with their phase as callers see it (Paused included) */
  targets(): Promise<{ sandbox: Sandbox; policy: AutoPausePolicy }[]>;
  pause(id: string): Promise<unknown>;
  resume(id: string): Promise<unknown>;
  kill(id: string): Promise<unknown>;
  store?: AutoPauseStatusStore;
  tickMs?: number;
  /** bytes of probe stdout kept; the rest is discarded */
  maxProbeOutput?: number;
}

export class AutoPauseController {
  readonly store: AutoPauseStatusStore;
  constructor(private readonly o: AutoPauseControllerOptions) {
    this.store = o.store ?? new MemoryStatusStore();
  }

  /** Until aborted: tick, sleep tickMs of the clock's time. */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      await this.tick();
      await this.o.clock.sleep(this.o.tickMs ?? 1000, signal).catch(() => undefined);
    }
  }

  async tick(): Promise<void> {
    const targets = await this.o.targets();
    await Promise.all(
      targets.map(({ sandbox, policy }) =>
        this.reconcile(sandbox, policy).catch((err: unknown) =>
          this.o.logger.warn(
            { sandbox: sandbox.id, owner: sandbox.owner, op: "autopause", err },
            "auto pause/wake step failed; retried next tick",
          ),
        ),
      ),
    );
  }

  private async reconcile(sandbox: Sandbox, policy: AutoPausePolicy): Promise<void> {
    const phase =
      sandbox.phase === "Running" && sandbox.ready ? "running" : sandbox.phase === "Paused" ? "paused" : undefined;
    if (!phase) return; // Pending, Pausing, Resuming, terminal: nothing to decide now
    const stored = await this.store.get(sandbox.id);
    const st: AutoPauseStatus = stored ? structuredClone(stored) : { probes: {} };
    if (phase === "running") {
      const due = dueProbes(policy.probes, st.probes, this.o.clock.now());
      const results = await Promise.all(due.map((p) => this.probe(sandbox.id, p)));
      for (const [i, p] of due.entries())
        st.probes[p.name] = applyProbeOutcome(st.probes[p.name], p.name, results[i], this.o.clock.now());
    }
    const now = this.o.clock.now();
    const d = decideAutoPause(
      policy,
      {
        phase,
        createdAt: new Date(sandbox.createdAt),
        lastActivityAt: sandbox.lastActivityAt ? new Date(sandbox.lastActivityAt) : undefined,
        resumedAt: st.resumedAt ? new Date(st.resumedAt) : undefined,
        probes: st.probes,
        nextResumeTime: st.nextResumeTime ? new Date(st.nextResumeTime) : undefined,
      },
      now,
    );
    const next = this.statusAfter(st, phase, d, now);
    if (d.action !== "none") {
      this.o.logger.info(
        { sandbox: sandbox.id, owner: sandbox.owner, op: "autopause", action: d.action, reason: d.reason },
        "automatic lifecycle action",
      );
      try {
        if (d.action === "pause") await this.o.pause(sandbox.id);
        else if (d.action === "resume") await this.o.resume(sandbox.id);
        else {
          await this.o.kill(sandbox.id);
          await this.store.delete(sandbox.id);
          return;
        }
      } catch (err) {
        next.lastAction = { action: d.action, reason: d.reason, at: now.toISOString(), error: (err as Error).message };
        await this.store.put(sandbox.id, { ...st, lastAction: next.lastAction });
        throw err;
      }
    }
    // write status only when it changed (file stores fsync; the CR store costs an API write)
    if (JSON.stringify(next) !== JSON.stringify(stored)) await this.store.put(sandbox.id, next);
  }

  private statusAfter(st: AutoPauseStatus, phase: "running" | "paused", d: Decision, now: Date): AutoPauseStatus {
    const iso = (x: Date | undefined) => x?.toISOString();
    if (d.action === "pause") {
      // probes do not run while paused; the recorded wake time is what wakes it
      return {
        probes: {},
        nextResumeTime: iso(d.nextResumeTime),
        resumedAt: st.resumedAt,
        lastAction: { action: "pause", reason: d.reason, at: now.toISOString() },
      };
    }
    if (d.action === "resume")
      return {
        probes: {},
        resumedAt: now.toISOString(),
        lastAction: { action: "resume", reason: d.reason, at: now.toISOString() },
      };
    return {
      ...st,
      nextPauseTime: iso(d.nextPauseTime),
      nextPauseReason: d.nextPauseReason,
      nextResumeTime: phase === "running" ? iso(d.nextResumeTime) : st.nextResumeTime,
    };
  }

  private async probe(
    id: string,
    p: ProbeSpec,
  ): Promise<{ ok: boolean; stdout: string; exitCode: number; timedOut: boolean }> {
    const max = this.o.maxProbeOutput ?? 4096;
    try {
      const s = await this.o.probeBackend.exec(id, { command: p.command, timeoutMs: p.timeoutMs });
      const stdout = boundedText(s, max);
      // stderr is not used; an error on either stream ends the probe as failed, never the process
      s.stderr.on("error", () => undefined);
      s.stderr.resume();
      // the result can settle while stdout is still draining
      const [r, text] = await Promise.all([s.result, stdout]);
      return {
        ok: r.exitCode === 0 && !r.timedOut && !text.flooded,
        stdout: text.kept,
        exitCode: r.exitCode,
        timedOut: r.timedOut,
      };
    } catch {
      return { ok: false, stdout: "", exitCode: -1, timedOut: false };
    }
  }
}

/** Past this many bytes of stdout a probe is killed and counts as failed: draining a flood costs the service CPU. */
export const PROBE_FLOOD_BYTES = 1024 * 1024;

/**
 * The first `max` bytes of stdout, decoded once (a chunk boundary never splits a character);
 * the rest is read and dropped, so the command is never blocked on a full pipe.
 */
function boundedText(s: ExecSession, max: number): Promise<{ kept: string; flooded: boolean }> {
  const chunks: Buffer[] = [];
  let kept = 0;
  let seen = 0;
  s.stdout.on("data", (d: Buffer) => {
    seen += d.length;
    if (kept < max) {
      const part = d.subarray(0, max - kept);
      chunks.push(part);
      kept += part.length;
    }
    if (seen > PROBE_FLOOD_BYTES && seen - d.length <= PROBE_FLOOD_BYTES) s.kill();
  });
  return finished(s.stdout)
    .catch(() => undefined)
    .then(() => ({ kept: Buffer.concat(chunks).toString("utf8"), flooded: seen > PROBE_FLOOD_BYTES }));
}
