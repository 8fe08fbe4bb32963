// The admission side of a resume, as TransitionHooks run in the sandbox's pause/resume queue
// turn: reserve what the sandbox will hold before anything moves (429 over budget, the sandbox
// stays paused), and if the resume fails give back only what this call reserved: a sandbox that
// was already running keeps its own reservation.
import type { Admission } from "./admission.ts";
import type { Sandbox, SizeClass, TransitionHooks } from "./types.ts";

export interface ResumeAdmissionOptions {
  admission: Admission;
  sizeClasses: Record<string, SizeClass>;
  /** the sandbox, checked to belong to the caller (throws NotFoundError) */
  owned(): Promise<Sandbox>;
  /** called once the reservation is taken */
  reserved?(id: string): void;
}

export function resumeAdmission(id: string, o: ResumeAdmissionOptions): TransitionHooks {
  let reservedBefore = false;
  return {
    before: async () => {
      const s = await o.owned();
      // a paused sandbox reports zero requests (it holds nothing); reserve what it will hold
      const sc = Object.hasOwn(o.sizeClasses, s.size) ? o.sizeClasses[s.size] : undefined;
      reservedBefore = o.admission.has(id);
      o.admission.admit({
        id,
        owner: s.owner,
        size: {
          name: s.size,
          cpuRequestMillis: sc?.cpuRequestMillis ?? s.cpuRequestMillis,
          memoryRequestBytes: sc?.memoryRequestBytes ?? s.memoryRequestBytes,
        },
      });
      o.reserved?.(id);
    },
    failed: () => {
      if (!reservedBefore) o.admission.release(id);
    },
  };
}
