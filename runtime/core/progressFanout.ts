// Progress of a pause or resume, delivered to every caller waiting on that sandbox's operation,
// not only the one that started it: a second `sbx pause` (or an exec's auto-resume and an
// explicit resume) runs after the first, and should watch the same bytes move. The pause/resume
// service (runtime/snapshot/service.ts) holds the one instance.
import type { TransferProgress } from "./types.ts";

type Listener = (p: TransferProgress) => void;

export class ProgressFanout {
  private readonly listeners = new Map<string, Set<Listener>>();

  /** Delivers key's progress of operation `op` to listener until the returned function is called. */
  add(key: string, op: TransferProgress["op"], listener: Listener | undefined): () => void {
    if (!listener) return () => undefined;
    const filtered: Listener = (p) => {
      if (p.op === op) listener(p);
    };
    let set = this.listeners.get(key);
    if (!set) {
      set = new Set();
      this.listeners.set(key, set);
    }
    set.add(filtered);
    return () => {
      set.delete(filtered);
      if (set.size === 0 && this.listeners.get(key) === set) this.listeners.delete(key);
    };
  }

  emit(key: string, p: TransferProgress): void {
    for (const listener of this.listeners.get(key) ?? []) listener(p);
  }

  /** what to pass down as onProgress for key */
  sink(key: string): Listener {
    return (p) => this.emit(key, p);
  }
}
