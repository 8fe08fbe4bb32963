// Admission: the in-memory gate in front of the substrate. Every create reserves its CPU and
// memory requests here before anything exists; over-budget creates get a CapacityError (429)
// naming what is short. The namespace ResourceQuota stays the hard ceiling behind it.
//
// All methods are synchronous on purpose: JavaScript runs them to completion, so two
// concurrent creates can never both see the same free room. That is what makes "never over
// budget" hold without locks.
import { CapacityError } from "./errors.ts";
import { formatCpu, formatMemory } from "./quantity.ts";
import { TERMINAL_PHASES, type Sandbox } from "./types.ts";

export interface Budget {
  cpuMillis: number;
  memoryBytes: number;
}

export interface Reservation {
  id: string;
  cpuMillis: number;
  memoryBytes: number;
  /** order of reservation; a reconcile only drops reservations older than its listing */
  seq: number;
}

export interface AdmissionUsage {
  budget: Budget;
  used: Budget;
  free: Budget;
  reservations: number;
}

export interface AdmissionOptions {
  /** the Retry-After a rejected caller is told; capacity frees as sandboxes end */
  retryAfterSeconds?: number;
}

/** What admission needs from a spec: its id and its size class's requests. */
export interface AdmissionRequest {
  id: string;
  size: { name?: string; cpuRequestMillis: number; memoryRequestBytes: number };
}

export class Admission {
  private readonly reservations = new Map<string, Reservation>();
  private usedCpu = 0;
  private usedMemory = 0;
  private nextSeq = 1;
  private readonly retryAfterSeconds: number;

  constructor(
    readonly budget: Budget,
    opts: AdmissionOptions = {},
  ) {
    this.retryAfterSeconds = opts.retryAfterSeconds ?? 5;
  }

  /**
   * Reserve the spec's requests or throw CapacityError. Admitting an id that already holds a
   * reservation returns that reservation (a retried create is not counted twice).
   */
  admit(req: AdmissionRequest): Reservation {
    const existing = this.reservations.get(req.id);
    if (existing) return existing;
    const cpu = req.size.cpuRequestMillis;
    const mem = req.size.memoryRequestBytes;
    const short: string[] = [];
    if (this.usedCpu + cpu > this.budget.cpuMillis) {
      short.push(
        `cpu (requested ${formatCpu(cpu)}, free ${formatCpu(Math.max(0, this.budget.cpuMillis - this.usedCpu))} of ${formatCpu(this.budget.cpuMillis)})`,
      );
    }
    if (this.usedMemory + mem > this.budget.memoryBytes) {
      short.push(
        `memory (requested ${formatMemory(mem)}, free ${formatMemory(Math.max(0, this.budget.memoryBytes - this.usedMemory))} of ${formatMemory(this.budget.memoryBytes)})`,
      );
    }
    if (short.length > 0) {
      throw new CapacityError(
        `admission: not enough capacity for size ${req.size.name ?? "?"}: short on ${short.join(" and ")}; retry later, kill idle sandboxes, or use a smaller size`,
        this.retryAfterSeconds,
        { short: short.map((s) => s.split(" ")[0]) },
      );
    }
    return this.add(req.id, cpu, mem);
  }

  /** Give a reservation back. Idempotent: releasing an unknown id is a no-op returning false. */
  release(id: string): boolean {
    const r = this.reservations.get(id);
    if (!r) return false;
    this.reservations.delete(id);
    this.usedCpu -= r.cpuMillis;
    this.usedMemory -= r.memoryBytes;
    return true;
  }

  has(id: string): boolean {
    return this.reservations.has(id);
  }

  ids(): string[] {
    return [...this.reservations.keys()];
  }

  /**
   * Account for a sandbox that exists but holds no reservation (found after a restart, or
   * created by another replica). Never rejects: it already runs, so the budget must show it
   * even when that puts usage over the budget (new creates are then rejected until it drops).
   */
  adopt(s: Pick<Sandbox, "id" | "phase" | "cpuRequestMillis" | "memoryRequestBytes">): boolean {
    if (this.reservations.has(s.id) || !holdsCapacity(s.phase)) return false;
    this.add(s.id, s.cpuRequestMillis, s.memoryRequestBytes);
    return true;
  }

  /** A marker to take before listing the substrate; pass it to rebuild as `listedAfter`. */
  mark(): number {
    return this.nextSeq;
  }

  /**
   * Make the budget equal what is live: adopt every live sandbox that holds capacity, drop
   * reservations whose sandbox is gone or terminal. `keep` lists ids that must survive even
   * when not (yet) listed: creates still in flight. Reservations made at or after `listedAfter`
   * (a mark() taken before the listing) are newer than the listing and always survive.
   */
  rebuild(
    live: readonly Sandbox[],
    keep: ReadonlySet<string> = new Set(),
    listedAfter: number = Number.POSITIVE_INFINITY,
  ): { adopted: string[]; released: string[] } {
    const liveHolding = new Map(live.filter((s) => holdsCapacity(s.phase)).map((s) => [s.id, s]));
    const released: string[] = [];
    for (const [id, r] of this.reservations) {
      if (!liveHolding.has(id) && !keep.has(id) && r.seq < listedAfter) {
        this.release(id);
        released.push(id);
      }
    }
    const adopted: string[] = [];
    for (const s of liveHolding.values()) if (this.adopt(s)) adopted.push(s.id);
    return { adopted, released };
  }

  usage(): AdmissionUsage {
    const used = { cpuMillis: this.usedCpu, memoryBytes: this.usedMemory };
    return {
      budget: { ...this.budget },
      used,
      free: {
        cpuMillis: this.budget.cpuMillis - used.cpuMillis,
        memoryBytes: this.budget.memoryBytes - used.memoryBytes,
      },
      reservations: this.reservations.size,
    };
  }

  private add(id: string, cpuMillis: number, memoryBytes: number): Reservation {
    const r = { id, cpuMillis, memoryBytes, seq: this.nextSeq++ };
    this.reservations.set(r.id, r);
    this.usedCpu += r.cpuMillis;
    this.usedMemory += r.memoryBytes;
    return r;
  }
}

/** Phases whose compute counts against the budget. Paused released its compute; terminal is done. */
export function holdsCapacity(phase: Sandbox["phase"]): boolean {
  return !TERMINAL_PHASES.has(phase) && phase !== "Paused";
}
